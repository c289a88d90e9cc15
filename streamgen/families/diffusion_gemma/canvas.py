"""One DiffusionGemma canvas: transformers' denoising loop re-driven through the meter, and the
verification rows that score every block of a draft in one decoder call.

The loop mirrors ``DiffusionGemmaGenerationMixin._denoising_step`` operation for operation (the same
sampler, temperature schedule, stopping rule and RNG draws in the same order), so that a seeded run
yields generate()'s tokens; the only addition is ``pinned``: accepted draft tokens at the canvas start
that every step puts back (a stream step's accepted run inside the first rejected block).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch


@contextmanager
def seeded_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Fork the torch RNG (CPU, and the CUDA device if any) and seed it; restored on exit.

    Seeds the generators the sampler draws from, as ``torch.manual_seed`` does for them; that call
    would also queue a seed for every uninitialised accelerator backend (CUDA, XPU, MTIA), capturing
    a stack trace for each — 0.2 ms per run on a CPU machine."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(seed)
        if device.type == "cuda":
            torch.cuda.manual_seed_all(seed)
        yield


@contextmanager
def unchecked_distributions() -> Iterator[None]:
    """transformers' sampler and stopping rule build ``torch.distributions.Categorical`` objects each
    step; their argument checks (finite logits) cost a quarter of each construction and change no
    number. Off for the loop, restored after (torch's documented switch; ``python -O`` turns it off too).
    The switch is process-wide: model calls in one process run one at a time (an actor; the demo's
    single model thread), so loops never overlap."""
    before = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(before)


class DenoiseLoop:
    """Denoise one canvas after ``context`` (the ids the encoder cache covers)."""

    def __init__(self, decoder: Any, cache: Any, context: list[int], pinned: Sequence[int]) -> None:
        from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
            EntropyBoundSampler,
            LinearTemperatureScheduleLogitsProcessor,
            StableAndConfidentStoppingCriteria,
        )

        gc, self.d = decoder.gc, decoder
        self.cache, self.context = cache, context
        self.length, self.steps = decoder.canvas, int(gc.max_denoising_steps)
        self.vocab = int(decoder.text_config.vocab_size)
        self.pinned = torch.tensor(list(pinned), dtype=torch.long, device=decoder.device)
        # Any: transformers' stubs want LongTensor / int where generate() itself passes int32 tensors
        self.sampler: Any = EntropyBoundSampler(gc.sampler_config, self.length, self.vocab, self.steps)
        # applied one by one, as LogitsProcessorList does (which inspects each one's signature per call)
        self.processors: list[Any] = []
        if gc.t_min is not None and gc.t_max is not None:
            self.processors.append(LinearTemperatureScheduleLogitsProcessor(gc.t_min, gc.t_max, self.steps))
        self.stop: Any = None
        if gc.stability_threshold is not None and gc.confidence_threshold is not None:
            self.stop = StableAndConfidentStoppingCriteria(gc.stability_threshold, gc.confidence_threshold)

    def _pin(self, canvas: torch.Tensor) -> torch.Tensor:
        if len(self.pinned):
            canvas = canvas.clone()
            canvas[0, : len(self.pinned)] = self.pinned
        return canvas

    def run(self, steps: int | None = None) -> list[int]:
        """The canvas's argmax when the stopping rule fires or the steps run out (``steps``: at most that
        many decoder calls, the schedule unchanged — the confirming canvas of a kept-whole draft)."""
        d, dev, start = self.d, self.d.device, len(self.context)
        canvas = self._pin(self.sampler.initialize_canvas(1, dev))
        model = d.model.model.decoder
        ones = torch.ones(1, start + self.length, dtype=torch.bool, device=dev)
        masks = model.create_diffusion_decoder_attention_mask(config=d.model.config, inputs_embeds=canvas.unsqueeze(-1),
                                                              cache=self.cache, decoder_attention_mask=ones)
        positions = torch.arange(start, start + self.length, dtype=torch.int32, device=dev)[None]
        ids = torch.tensor([self.context], dtype=torch.long, device=dev)
        argmax, conditioning = canvas, None
        with unchecked_distributions():
            for i, step in enumerate(reversed(range(1, self.steps + 1))):
                canvas, argmax, conditioning, done = self._step(canvas, ids, positions, masks, conditioning, step)
                if done or (steps is not None and i + 1 >= steps):
                    break
        return argmax[0].tolist()  # one transfer for the canvas, not one per position

    def _step(self, canvas: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor, masks: Any,
              conditioning: torch.Tensor | None, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
        cur = torch.tensor(step, device=canvas.device, dtype=torch.int32)  # a tensor, as upstream (float rounding)
        raw = self.d.decode_call(canvas, self.cache, positions, masks, conditioning, "denoise")
        logits = raw
        for processor in self.processors:
            logits = processor(ids, logits, cur_step=cur)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        sampled = torch.multinomial(probs.view(-1, self.vocab), num_samples=1).view(1, self.length)
        argmax = self._pin(torch.argmax(logits, dim=-1))
        accepted = self.sampler.accept_canvas(canvas, sampled, logits, cur).clone()
        canvas = self._pin(self.sampler.renoise_canvas(accepted, cur).clone())
        done = bool(self.stop(argmax, logits).all()) if self.stop is not None else False
        return canvas, argmax, logits.to(self.d.model.model.decoder.embed_tokens.weight.dtype), done


@dataclass(frozen=True)
class BlockRows:
    """The decoder inputs scoring every draft block at once: one batch row per block."""

    canvas: torch.Tensor  # (blocks, canvas_length): the block's draft tokens (visible) or noise (hidden)
    positions: torch.Tensor  # (blocks, canvas_length): absolute positions, as generation gives that block
    cache: Any  # the full-length encoder cache (request + draft), repeated per row
    masks: dict[str, torch.Tensor]  # per layer type: additive (blocks, 1, canvas, cache + canvas)


def block_rows(decoder: Any, full: Any, prompt_len: int, draft: list[int], mode: str) -> BlockRows:
    """Row ``b`` sees the request and draft blocks ``< b`` through the cache (sliding layers only their
    last ``window − 1`` positions, as generate()'s cache keeps) plus its own canvas, never later blocks."""
    from transformers import DynamicCache

    dev, length = decoder.device, decoder.canvas
    blocks = -(-len(draft) // length)
    rng = torch.Generator(device=dev).manual_seed(int(decoder.settings.seed))  # same noise every call
    noise = torch.randint(0, int(decoder.text_config.vocab_size), (blocks, length), device=dev, generator=rng)
    canvas = noise.clone()
    if mode == "visible":
        flat = canvas.view(-1)
        flat[: len(draft)] = torch.tensor(draft, dtype=torch.long, device=dev)
    starts = torch.tensor([prompt_len + b * length for b in range(blocks)], device=dev)
    positions = (starts[:, None] + torch.arange(length, device=dev)[None]).to(torch.int32)
    cache = DynamicCache()
    for i, layer in enumerate(full.layers):
        cache.update(layer.keys.expand(blocks, -1, -1, -1), layer.values.expand(blocks, -1, -1, -1), i)
    cached = prompt_len + len(draft)
    window = int(decoder.text_config.sliding_window)
    dtype = decoder.model.dtype
    masks = {kind: _row_mask(starts, cached, length, window if kind == "sliding_attention" else None, dtype)
             for kind in set(decoder.text_config.layer_types)}
    return BlockRows(canvas, positions, cache, masks)


def _row_mask(starts: torch.Tensor, cached: int, length: int, window: int | None, dtype: torch.dtype) -> torch.Tensor:
    keys = torch.arange(cached + length, device=starts.device)[None]
    lo = torch.zeros_like(starts) if window is None else (starts - (window - 1)).clamp_min(0)
    allowed = ((keys >= lo[:, None]) & (keys < starts[:, None])) | (keys >= cached)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=starts.device)
    mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)
    return mask[:, None, None, :].expand(-1, 1, length, -1)
