"""DiffusionGemma (transformers' ``DiffusionGemmaForBlockDiffusion``): block diffusion, metered, streamed.

The model has two halves sharing weights: a causal **encoder** that writes the request and every finished
canvas into a KV cache, and a bidirectional **decoder** that denoises one canvas (``canvas_length``
tokens) at a time, reading that cache. Base decoding here is transformers' own ``generate()`` loop
re-driven through the :class:`ForwardMeter` (same sampler, temperature schedule, stopping rule, RNG
draws, so the tokens are identical for the same seed — the parity tests pin it): per canvas, one
encoder call (the request at first, then the previous canvas) and one decoder call per denoising step.

Streaming verification (docs/diffusion.md): ONE encoder call over request + draft fills a full-length
cache, then ONE decoder call scores every draft block at once (a batch row per block; row ``b`` sees
the request and blocks ``< b`` through the cache, masked per layer exactly as generation would, and
its own block in the canvas — the draft's tokens in ``visible`` mode, noise in ``hidden`` mode).
Regeneration keeps the accepted whole blocks as context (their cache replayed, no forward), pins the
accepted tokens of the first rejected block, and denoises on from there. The draft's EOS is a draft
position; a draft kept whole that ended (EOS) or fills the budget is the answer, emitted by one
confirming canvas of the fewest denoising steps (docs/diffusion.md, "The end of an accepted draft").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import torch

from streamgen.acceptance_rules import AcceptanceRule
from streamgen.config import ConfigError
from streamgen.decoding.base import Family, Generation, StepResult
from streamgen.decoding.host import verification_from_probs
from streamgen.decoding.over_text import OverText
from streamgen.decoding.verification import Verification, accepted_length, draft_is_complete
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.requests.chat import Message

log = logging.getLogger(__name__)

VERIFIER_MODES = ("visible", "hidden")


@dataclass(frozen=True)
class DGSettings:
    """Decode settings (``decoding:`` in the model YAML); None = the checkpoint's generation config,
    else transformers' defaults (48 steps, entropy bound 0.1, t 0.8→0.4, stability 1, confidence 0.005)."""

    max_denoising_steps: int | None = None
    entropy_bound: float | None = None
    t_min: float | None = None
    t_max: float | None = None
    stability_threshold: int | None = None
    confidence_threshold: float | None = None
    seed: int = 0  # torch RNG seed of every run (canvas noise, sampling): runs are deterministic
    verifier_mode: str = "visible"  # visible | hidden (the grid sweeps it via verifier_modes)
    eos_token_ids: tuple[int, ...] = ()  # extra end-of-answer ids besides the tokenizer's and the config's


def dg_settings_from(decoding: dict[str, Any]) -> DGSettings:
    """Parse ``cfg.decoding``; unknown keys and bad values raise one :class:`ConfigError`."""
    known = {f.name for f in fields(DGSettings)}
    problems = [f"decoding.{k} is not a diffusion_gemma setting: known are {sorted(known)}"
                for k in decoding if k not in known]
    if problems:
        raise ConfigError(problems)
    s = DGSettings(**{**decoding, "eos_token_ids": tuple(int(t) for t in decoding.get("eos_token_ids", ()))})
    if s.verifier_mode not in VERIFIER_MODES:
        problems.append(f"decoding.verifier_mode={s.verifier_mode!r} must be visible or hidden")
    if s.max_denoising_steps is not None and int(s.max_denoising_steps) < 1:
        problems.append("decoding.max_denoising_steps must be ≥ 1")
    if problems:
        raise ConfigError(problems)
    return s


def generation_config(model: Any, s: DGSettings, eos_ids: Collection[int], max_new_tokens: int) -> Any:
    """The generation config ``model.generate(**same settings)`` would use (checkpoint's, then defaults)."""
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig

    overrides: dict[str, Any] = {k: getattr(s, k) for k in ("max_denoising_steps", "t_min", "t_max",
                                                             "stability_threshold") if getattr(s, k) is not None}
    if s.confidence_threshold is not None:
        overrides["confidence_threshold"] = float(s.confidence_threshold)
    if s.entropy_bound is not None:
        overrides["sampler_config"] = EntropyBoundSamplerConfig(entropy_bound=float(s.entropy_bound))
    try:  # the mixin's own merge, so the parameterisation cannot drift from generate()'s
        gc, _ = model._prepare_generation_config(None, max_new_tokens=max_new_tokens,
                                                 eos_token_id=sorted(eos_ids), **overrides)
    except ValueError as exc:
        raise ConfigError([f"decoding: {exc}"]) from exc
    return gc


class Scored(NamedTuple):
    """One verification: the verdict, the request ids, and the full-length cache of request + draft
    (a tuple whose first item is the verdict, like the other families' ``score``)."""

    verification: Verification
    prompt: list[int]
    cache: Any


class DiffusionGemmaDecoder(OverText):
    """DiffusionGemma behind the Decoder protocol; every encoder and every decoder call is one forward."""

    family: Family = "diffusion_gemma"

    def __init__(self, model: Any, tokenizer: Any, settings: DGSettings, *, max_new_tokens: int = 256,
                 device: str = "cpu", text: AutoregressiveDecoder | None = None) -> None:
        tc = model.config.get_text_config(decoder=True)
        self.text = text or AutoregressiveDecoder(model, tokenizer, max_new_tokens=max_new_tokens, device=device,
                                                  max_context=tc.max_position_embeddings,
                                                  eos_token_ids=_eos_ids(tc, tokenizer))
        self.model, self.settings, self.text_config = model, settings, tc
        self.max_new_tokens = self.gen_length = int(max_new_tokens)
        self.canvas = int(model.config.canvas_length)
        self.n_blocks = math.ceil(self.gen_length / self.canvas)
        self.verifier_mode = settings.verifier_mode
        self.meter = self.text.meter
        gen_eos = model.generation_config.eos_token_id
        gen_eos = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
        self.eos_ids = (frozenset(self.text.eos_token_ids) | frozenset(int(t) for t in gen_eos)
                        | frozenset(settings.eos_token_ids))
        self.gc = generation_config(model, settings, self.eos_ids, self.gen_length)
        self.device = torch.device(device)

    @property
    def min_denoise_steps(self) -> int:
        """Fewest decoder calls a canvas can take: the stability rule needs ``stability_threshold``
        earlier identical argmax canvases; without a stopping rule every step runs."""
        gc = self.gc
        if gc.stability_threshold is None or gc.confidence_threshold is None:
            return int(gc.max_denoising_steps)
        return min(int(gc.stability_threshold) + 1, int(gc.max_denoising_steps))

    @property
    def min_residual_forwards(self) -> int:
        """Verify (1 encoder + 1 decoder call) + one decoding unit: a canvas's denoising, at its fewest
        steps (docs/diffusion.md); a kept-whole draft costs exactly this (:meth:`confirm`)."""
        return 2 + self.min_denoise_steps

    # -- the two kinds of model call -----------------------------------------------------------

    def encode(self, cache: Any, ids: Sequence[int], start: int, kind: str) -> None:
        """ONE metered encoder call writing ``ids`` (at positions ``start``…) into ``cache``."""
        enc = self.model.model.encoder
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        pos = torch.arange(start, start + len(ids), dtype=torch.int32, device=self.device)[None]
        attn = torch.ones(1, start + len(ids), dtype=torch.bool, device=self.device)
        dummy = torch.empty(1, len(ids), 0, dtype=self.model.dtype, device=self.device)
        masks = enc.create_masks_for_generate(config=self.model.config, inputs_embeds=dummy, attention_mask=attn,
                                              cache=cache, position_ids=pos)
        with self.meter.call(kind, len(ids)):
            enc(input_ids=input_ids, attention_mask=masks, cache=cache, position_ids=pos)

    def decode_call(self, canvas: torch.Tensor, cache: Any, positions: torch.Tensor, masks: Any,
                    self_conditioning: torch.Tensor | None, kind: str) -> torch.Tensor:
        """ONE metered decoder call over ``canvas`` (batch, canvas_length) → logits (batch, canvas, vocab)."""
        with self.meter.call(kind, canvas.numel()):
            out = self.model(decoder_input_ids=canvas, self_conditioning_logits=self_conditioning,
                             decoder_attention_mask=masks, cache=cache, decoder_position_ids=positions)
        return out.logits

    # -- denoising (transformers' generate loop, metered) --------------------------------------

    def denoise_block(self, cache: Any, context: list[int], pinned: Sequence[int]) -> list[int]:
        """Denoise the canvas after ``context`` (the ids ``cache`` covers); ``pinned`` leading tokens stay."""
        from streamgen.families.diffusion_gemma.canvas import DenoiseLoop

        return DenoiseLoop(self, cache, context, pinned).run()

    def confirm(self, cache: Any, prompt: list[int], draft: list[int]) -> None:
        """The canvas that emits a kept-whole draft: the draft's last block denoised, the draft pinned, for
        the fewest steps a canvas takes; what it samples falls after the EOS or the budget, so nothing is
        committed (the draft is the answer). Its ``min_denoise_steps`` calls make the floor."""
        from streamgen.families.diffusion_gemma.canvas import DenoiseLoop

        whole = (len(draft) - 1) // self.canvas * self.canvas
        cache = self.replay(cache, len(prompt) + whole)
        DenoiseLoop(self, cache, prompt + draft[:whole], draft[whole:]).run(steps=self.min_denoise_steps)

    def decode_from(self, cache: Any, prompt: list[int], answer: list[int], pinned: Sequence[int]) -> list[int]:
        """Canvas after canvas until one holds an EOS or completes a stop string (which may span canvases),
        or the budget's canvases are done; ``answer`` holds
        whole accepted blocks already in ``cache``, ``pinned`` the accepted start of the next one."""
        limit = self.n_blocks * self.canvas
        while True:
            block = self.denoise_block(cache, prompt + answer, pinned)
            pinned = ()
            answer = answer + block
            if len(answer) >= limit or any(t in self.eos_ids for t in block) or self.stop_length(answer) is not None:
                return answer
            self.encode(cache, block, len(prompt) + len(answer) - self.canvas, "encode")

    def new_cache(self) -> Any:
        """The cache generate() builds: sliding-window layers keep only their window."""
        from transformers import DynamicCache

        return DynamicCache(config=self.text_config)

    def replay(self, full: Any, keep: int) -> Any:
        """A generate()-shaped cache holding the first ``keep`` positions of a full-length one (no forward)."""
        cache = self.new_cache()
        for i, layer in enumerate(full.layers):
            cache.update(layer.keys[:, :, :keep], layer.values[:, :, :keep], i)
        return cache

    def _generation(self, answer: list[int], span: Any) -> Generation:
        eos = next((i for i, t in enumerate(answer) if t in self.eos_ids), None)
        tokens = answer[: self.gen_length if eos is None else min(eos + 1, self.gen_length)]
        stop = self.stop_length(tokens)
        tokens = tokens if stop is None else tokens[:stop]
        finished = bool(tokens) and tokens[-1] in self.eos_ids
        text = self.decode_text(tokens[:-1] if finished else tokens)
        stopped = stop is not None and not finished  # a stop string that is the EOS's own text: ended at EOS
        return Generation(tuple(int(t) for t in tokens), text, finished, span.wall_s, span.meter, None, stopped)

    def seeded(self) -> Any:
        """A forked torch RNG seeded with ``decoding.seed`` (the caller's RNG is left untouched)."""
        from streamgen.families.diffusion_gemma.canvas import seeded_rng

        return seeded_rng(self.settings.seed, self.device)

    def _prompt(self, messages: Sequence[Message]) -> list[int]:
        prompt = self.text.render(messages)
        self.text.check_fits(len(prompt))
        return prompt

    @torch.inference_mode()
    def generate(self, messages: Sequence[Message]) -> Generation:
        """Base run: encode the request, then canvas after canvas (== ``model.generate`` for the seed)."""
        with self.seeded(), self.meter.span() as span:
            prompt = self._prompt(messages)
            cache = self.new_cache()
            self.encode(cache, prompt, 0, "encode")
            answer = self.decode_from(cache, prompt, [], ())
        return self._generation(answer, span)

    @torch.inference_mode()
    def score(self, messages: Sequence[Message], draft: Sequence[int], mode: str | None = None) -> Scored:
        """Verify ``draft`` (non-empty, its EOS included): 1 encoder call + 1 decoder call over all its blocks."""
        from transformers import DynamicCache

        from streamgen.families.diffusion_gemma.canvas import block_rows

        mode = mode or self.verifier_mode
        if mode not in VERIFIER_MODES:
            raise ConfigError([f"verifier mode {mode!r} must be visible or hidden"])
        if not draft:
            raise ValueError("score() needs a non-empty draft: the first arrival has nothing to verify")
        prompt = self._prompt(messages)
        cache = DynamicCache()  # full length: every row masks its own window below
        self.encode(cache, [*prompt, *draft], 0, "verify_encode")
        rows = block_rows(self, cache, len(prompt), list(draft), mode)
        logits = self.decode_call(rows.canvas, rows.cache, rows.positions, rows.masks, None, f"verify_{mode}")
        probs = logits.reshape(-1, logits.shape[-1])[: len(draft)].float().softmax(-1)
        return Scored(verification_from_probs(probs, draft), prompt, cache)

    def open_stream(self) -> DiffusionGemmaSession:
        return DiffusionGemmaSession(self)


class DiffusionGemmaSession:
    """Stream steps: verify (encoder + decoder call) → accept → keep whole blocks, pin the rest → denoise."""

    def __init__(self, decoder: DiffusionGemmaDecoder) -> None:
        self.decoder = decoder

    @torch.inference_mode()
    def step(self, messages: Sequence[Message], draft: Sequence[int], rule: AcceptanceRule) -> StepResult:
        d = self.decoder
        content = d.content(draft)
        extra: dict[str, float] = {}
        accepted = 0
        with d.seeded(), d.meter.span() as span:  # rendering counts, as in every family (docs/accounting.md)
            if content:
                scored = d.score(messages, content)
                accepted = accepted_length(content, scored.verification, rule)
                extra["verify_median_prob"] = scored.verification.median_prob or 0.0
                answer = self._continue(scored, content, accepted, extra)
            else:
                prompt = d._prompt(messages)
                cache = d.new_cache()
                d.encode(cache, prompt, 0, "encode")
                answer = d.decode_from(cache, prompt, [], ())
        result = d._generation(answer, span)
        return StepResult(len(content), accepted, len(result.token_ids) - accepted, result, extra)

    def _continue(self, scored: Scored, content: list[int], accepted: int, extra: dict[str, float]) -> list[int]:
        """A kept-whole finished draft is the answer (one confirming canvas); otherwise the accepted whole
        blocks become context, the rest of the accepted run is pinned, and denoising continues."""
        d = self.decoder
        whole = accepted // d.canvas * d.canvas
        extra["accepted_whole_blocks"] = float(whole // d.canvas)
        if draft_is_complete(content, accepted, d.eos_ids, d.gen_length, stop=d.stop_length(content)):
            d.confirm(scored.cache, scored.prompt, content)
            return content
        cache = d.replay(scored.cache, len(scored.prompt) + whole)
        return d.decode_from(cache, scored.prompt, content[:whole], content[whole:accepted])

    def close(self) -> None:
        return None


def _eos_ids(text_config: Any, tokenizer: Any) -> list[int]:
    ids = text_config.eos_token_id
    out = [ids] if isinstance(ids, int) else list(ids or [])
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        out.append(int(tokenizer.eos_token_id))
    return out
