"""LLaDA / Dream style masked diffusion with full attention, and its (degenerate) draft verification.

The answer is a buffer of ``gen_length`` positions after the request. Each denoising step is ONE
forward over request + the whole buffer (no KV cache: every position sees every other), and reveals
some masked positions as the official samplers do (:mod:`streamgen.families.bidirectional.sampler`: the
geometry, the per-step counts, the argmax and confidence of each style, every knob):

- ``llada``: logits at ``i`` predict token ``i``; ``low_confidence`` remasking on LLaDA's linear schedule.
- ``dream``: logits at ``i-1`` predict token ``i`` (the one-position shift); ``entropy``,
  ``maskgit_plus`` or ``topk_margin`` on Dream's ``linspace(1, eps)`` schedule.

Every block is filled (the answer is cut at its first EOS afterwards), as the official samplers do.

Streaming verification is ONE forward over request + buffer, in two modes (``verifier_mode``):
``visible`` puts the draft in the buffer (each position can see its own token, so it is confirmed
whatever it is: paper §6.5), ``hidden`` masks the draft (the verdict is formed without the draft,
and without the context it needs). After it, the accepted run is fixed. A run that holds the draft's
EOS (or fills the buffer) is the answer: one confirming step emits it, and the positions after the EOS
are not decoded again (they lie after the answer). Otherwise the rest of the buffer is decoded by the
base run's procedure at the official rate per masked position: a block with m of its B positions masked
runs ceil(m · steps_per_block / B) steps (docs/diffusion.md; ``full_block_refill`` and
``refill_after_eos`` restore the earlier rules). :func:`probe_unrelated` scores a draft that answers
another request and reports its median probability and accepted length.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from streamgen.acceptance_rules import AcceptanceRule
from streamgen.config import ConfigError
from streamgen.decoding.base import Family, Generation, StepResult
from streamgen.decoding.host import verification_from_probs
from streamgen.decoding.memo import Decoded, DecodeMemo
from streamgen.decoding.over_text import OverText
from streamgen.decoding.verification import Verification, accepted_length
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.families.bidirectional.model import BidirLM
from streamgen.families.bidirectional.sampler import (
    BidirSettings,
    bidir_settings_from,
    choose,
    dream_transfer_count,
    geometry,
    llada_transfer_counts,
    proposals,
    refill_steps,
    with_benchmark,
)
from streamgen.requests.chat import Message

log = logging.getLogger(__name__)

__all__ = ["BidirSettings", "BidirectionalDecoder", "Buffer", "bidir_settings_from", "probe_unrelated"]


def full_attention_logits(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits of one bidirectional forward (batch, length, vocab).

    In-project :class:`BidirLM` and hub LLaDA/Dream code are bidirectional already; any other
    transformers causal LM (a test stand-in) gets an all-True 4-D attention mask.
    """
    if isinstance(model, BidirLM) or getattr(model.config, "model_type", "") in ("llada", "Dream", "dream"):
        return model(input_ids).logits
    n = input_ids.shape[1]
    mask = torch.ones(1, 1, n, n, dtype=torch.bool, device=input_ids.device)
    return model(input_ids=input_ids, attention_mask=mask).logits


@dataclass
class Buffer:
    """Request + answer buffer; ``None`` marks a masked answer position, ``prompt_masked`` the request
    positions that hold the mask id and are still masked (the official samplers may reveal them)."""

    prompt: list[int]
    answer: list[int | None]
    prompt_masked: list[int] = field(default_factory=list)

    def eos_pos(self, eos_ids: frozenset[int]) -> int | None:
        return next((i for i, t in enumerate(self.answer) if t is not None and t in eos_ids), None)

    def masked(self, end: int) -> list[int]:
        """Sequence positions still masked: the request's, then the answer's before answer index ``end``."""
        p = len(self.prompt)
        return [*self.prompt_masked, *(p + j for j in range(end) if self.answer[j] is None)]


@dataclass(frozen=True)
class ProbeResult:
    """Paper §6.5: how a verifier scores a draft that answers a different request."""

    mode: str
    draft_tokens: int
    accepted_tokens: int
    median_prob: float


class BidirectionalDecoder(OverText):
    """LLaDA / Dream style decoding behind the Decoder protocol; every denoising step is one forward."""

    family: Family = "bidirectional"
    min_residual_forwards = 2  # verify + one denoising step (docs/diffusion.md)

    def __init__(self, model: Any, tokenizer: Any, settings: BidirSettings, *, max_new_tokens: int = 256,
                 device: str = "cpu", text: AutoregressiveDecoder | None = None) -> None:
        self.text = text or AutoregressiveDecoder(model, tokenizer, max_new_tokens=max_new_tokens, device=device)
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        self.max_new_tokens = int(max_new_tokens)
        self.geometry = geometry(settings, max_new_tokens)
        self.gen_length, self.block_length = self.geometry.gen_length, self.geometry.block_length
        self.verifier_mode = settings.verifier_mode
        self.shift = settings.style == "dream"
        self.meter = self.text.meter
        self.eos_ids = frozenset(self.text.eos_token_ids) | frozenset(int(t) for t in settings.eos_token_ids)
        self.mask_id = _mask_id(model, tokenizer, settings.mask_token_id)
        self.device = torch.device(device)
        self.memo: DecodeMemo | None = None  # with_memo: base decodes shared within one example

    def with_memo(self, memo: DecodeMemo) -> BidirectionalDecoder:
        """This decoder (same weights, settings and meter) remembering its decodes of fully masked
        buffers in ``memo``: a step that keeps nothing is the base decode of its prefix (docs/diffusion.md)."""
        twin = copy.copy(self)
        twin.memo = memo
        return twin

    def for_benchmark(self, benchmark: str) -> BidirectionalDecoder:
        """A decoder with ``per_benchmark[benchmark]`` applied (same model, text decoder and meter)."""
        settings = with_benchmark(self.settings, benchmark)
        if settings is self.settings:
            return self
        return BidirectionalDecoder(self.model, self.tokenizer, settings, max_new_tokens=self.max_new_tokens,
                                    device=str(self.device), text=self.text)

    # -- one forward ---------------------------------------------------------------------------

    def logits_all(self, buf: Buffer, kind: str) -> torch.Tensor:
        """ONE metered forward over request + buffer; returns (length, vocab) float32 logits aligned so
        that row ``i`` predicts sequence position ``i`` (Dream's shift applied: row 0 is its own)."""
        ids = buf.prompt + [self.mask_id if t is None else t for t in buf.answer]
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        with self.meter.call(kind, len(ids)):
            logits = full_attention_logits(self.model, input_ids)[0].float()
        if self.shift:
            logits = torch.cat([logits[:1], logits[:-1]])
        return logits

    def forward(self, buf: Buffer, kind: str) -> torch.Tensor:
        """ONE metered forward; the (gen_length, vocab) rows of the answer positions (``row j`` predicts
        answer position ``j``)."""
        p = len(buf.prompt)
        rows = self.logits_all(buf, kind)[p:p + len(buf.answer)]
        if self.settings.suppress_mask_logit:
            rows = rows.clone()
            rows[:, self.mask_id] = float("-inf")
        return rows

    # -- denoising -----------------------------------------------------------------------------

    def _reveal(self, buf: Buffer, logits: torch.Tensor, end: int, n: int) -> None:
        """Reveal the ``n`` most confident masked positions before answer index ``end`` (request masks
        included); a position whose argmax is the mask id stays masked."""
        cand = buf.masked(end)
        if not cand or n <= 0:
            return
        x0, conf = proposals(logits[cand], self.settings, self.mask_id)
        p = len(buf.prompt)
        for i in choose(cand, conf, n):
            pos, tok = cand[i], int(x0[i])
            if tok == self.mask_id:
                continue
            if pos < p:
                buf.prompt[pos] = tok
                buf.prompt_masked.remove(pos)
            else:
                buf.answer[pos - p] = tok

    def block_steps(self, masked: int) -> int:
        """Denoising steps for a block with ``masked`` positions masked: the official rate
        (:func:`refill_steps`; a base run's full blocks get every step), or every step of the block with
        ``full_block_refill``."""
        spb = self.geometry.steps_per_block
        if self.settings.full_block_refill:
            return spb
        return refill_steps(masked, self.block_length, spb)

    def _denoise_block(self, buf: Buffer, end: int, masked: int) -> None:
        steps = self.block_steps(masked)
        if self.settings.style == "llada":
            for n in llada_transfer_counts(masked, steps):
                logits = self.logits_all(buf, "denoise")
                self._reveal(buf, logits, end, n)
            return
        for i in range(steps):
            logits = self.logits_all(buf, "denoise")
            self._reveal(buf, logits, end, dream_transfer_count(len(buf.masked(end)), i, steps, self.settings.eps))

    def denoise(self, buf: Buffer) -> None:
        """Fill the masked positions block by block, every block (``stop_after_eos_block``: stop after the
        block holding the first EOS or completing a stop string). A block with nothing masked (a stream
        step's accepted run) costs nothing."""
        for lo in range(0, self.gen_length, self.block_length):
            hi = lo + self.block_length
            masked = sum(t is None for t in buf.answer[lo:hi])
            if masked:
                self._denoise_block(buf, hi, masked)
            if self.settings.stop_after_eos_block and self.answer_end(buf) is not None:
                return

    def confirm(self, buf: Buffer) -> None:
        """The denoising step that emits a draft which leaves nothing to decode: one forward over request +
        buffer; what it reveals falls after the answer's end, so none is kept. It makes the floor 2."""
        self.forward(buf, "denoise")

    def decode(self, buf: Buffer) -> Decoded | None:
        """:meth:`denoise`, or, with a memo holding this fully masked buffer's decode, its result (returned:
        the cost the caller records on top of its own span). A decode that runs is remembered."""
        if self.memo is None or any(t is not None for t in buf.answer):
            self.denoise(buf)
            return None
        key = (repr(dataclasses.replace(self.settings, verifier_mode="")), self.stop_strings, tuple(buf.prompt),
               tuple(buf.prompt_masked))
        found = self.memo.get(key)
        if found is None:
            with self.meter.span() as span:
                self.denoise(buf)
            self.memo.put(key, Decoded((tuple(buf.prompt), tuple(buf.prompt_masked), tuple(buf.answer)),
                                       span.meter, span.wall_s))
            return None
        prompt, masked, answer = found.state
        buf.prompt, buf.prompt_masked, buf.answer = list(prompt), list(masked), list(answer)
        return found

    def answer_end(self, buf: Buffer) -> int | None:
        """The answer's length in ``buf``: through its first EOS, or through the token completing its first
        stop string (looked for in the leading run of revealed positions), whichever comes first; None:
        neither yet."""
        eos = buf.eos_pos(self.eos_ids)
        stop = self.stop_length(buf.answer[:eos])
        return stop if stop is not None else None if eos is None else eos + 1

    def _generation(self, buf: Buffer, span: Any, reused: Decoded | None = None) -> Generation:
        end, eos = self.answer_end(buf), buf.eos_pos(self.eos_ids)
        finished = eos is not None and end == eos + 1
        stopped = end is not None and not finished  # ended at a stop string
        tokens = [self.mask_id if t is None else int(t) for t in buf.answer[:end]]  # a never-revealed mask stays
        text = self.text.decode_text([t for t in tokens if t != self.mask_id])
        wall_s, meter = (span.wall_s, span.meter) if reused is None else (span.wall_s + reused.wall_s,
                                                                          span.meter + reused.meter)
        return Generation(tuple(tokens), text, finished, wall_s, meter, None, stopped)

    def _buffer(self, messages: Sequence[Message]) -> Buffer:
        prompt = self.text.render(messages)
        self.text.check_fits(len(prompt), self.gen_length)
        masked = [] if self.settings.fixed_prompt_masks else [i for i, t in enumerate(prompt) if t == self.mask_id]
        return Buffer(list(prompt), [None] * self.gen_length, masked)

    @torch.inference_mode()
    def generate(self, messages: Sequence[Message]) -> Generation:
        with self.meter.span() as span:  # rendering counts, as in every family (docs/accounting.md)
            buf = self._buffer(messages)
            reused = self.decode(buf)
        return self._generation(buf, span, reused)

    @torch.inference_mode()
    def score(self, messages: Sequence[Message], draft: Sequence[int],
              mode: str | None = None) -> tuple[Verification, Buffer]:
        """ONE forward scoring ``draft`` at answer positions 0..n-1, draft visible or hidden (masked)."""
        mode = mode or self.verifier_mode
        buf = self._buffer(messages)
        if mode == "visible":
            buf.answer[: len(draft)] = [int(t) for t in draft]
        probs = self.forward(buf, f"verify_{mode}")[: len(draft)].softmax(-1)
        return verification_from_probs(probs, draft), buf

    def leaves_nothing(self, buf: Buffer) -> bool:
        """Whether an accepted run leaves the procedure nothing to decode: no answer position is masked up
        to the accepted run's EOS (the positions after it lie after the answer: docs/diffusion.md), or to
        the buffer's end when it holds none; a stop string ends the answer as its EOS does
        (:meth:`answer_end`). ``refill_after_eos`` (the earlier rule): every position after
        the EOS must be filled too, unless ``stop_after_eos_block``."""
        tail_counts = self.settings.refill_after_eos and not self.settings.stop_after_eos_block
        end = None if tail_counts else self.answer_end(buf)
        return all(t is not None for t in buf.answer[: self.gen_length if end is None else end])

    def open_stream(self) -> BidirectionalSession:
        return BidirectionalSession(self)


class BidirectionalSession:
    """Stream steps: verify (1 forward, visible or hidden draft) → accept → the rest decoded as in a base run."""

    def __init__(self, decoder: BidirectionalDecoder) -> None:
        self.decoder = decoder

    @torch.inference_mode()
    def step(self, messages: Sequence[Message], draft: Sequence[int], rule: AcceptanceRule) -> StepResult:
        d = self.decoder
        extra: dict[str, float] = {}
        with d.meter.span() as span:
            positions = d.content(draft)
            accepted = 0
            if positions:
                verification, buf = d.score(messages, positions)
                accepted = accepted_length(positions, verification, rule)
                kept: list[int | None] = [None if t == d.mask_id else t for t in positions[:accepted]]
                buf.answer = [*kept, *([None] * (d.gen_length - accepted))]
                extra["verify_median_prob"] = verification.median_prob or 0.0  # positions is non-empty
            else:
                buf = d._buffer(messages)
            reused = None
            if d.leaves_nothing(buf):
                d.confirm(buf)  # the draft is the answer; one denoising step emits it
            else:  # every block with a masked position, each at the official rate; nothing kept: a base decode
                reused = d.decode(buf)
        answer = d._generation(buf, span, reused)
        return StepResult(len(positions), accepted, len(answer.token_ids) - accepted, answer, extra)

    def close(self) -> None:
        return None


def probe_unrelated(decoder: Any, messages: Sequence[Message], foreign_draft: Sequence[int],
                    rule: AcceptanceRule, mode: str | None = None) -> ProbeResult:
    """Score a draft answering a different request (paper §6.5): median probability, accepted run.

    Works for any decoder with ``content(draft)`` and ``score(messages, draft)`` (ReFusion's causal
    verifier, or this module's visible / hidden verifier)."""
    content = decoder.content(foreign_draft)
    args = (messages, content) if mode is None else (messages, content, mode)
    verification = decoder.score(*args)[0]
    label = str(mode or getattr(decoder, "verifier_mode", None) or "causal")
    return ProbeResult(label, len(content), accepted_length(content, verification, rule), verification.median_prob)



def _mask_id(model: Any, tokenizer: Any, configured: int | None) -> int:
    if configured is not None:
        return int(configured)
    spec = getattr(model, "spec", None)
    if spec is not None:
        return int(spec.mask_token_id)
    if isinstance(getattr(tokenizer, "mask_token_id", None), int):
        return int(tokenizer.mask_token_id)
    raise ConfigError(["no mask token: set decoding.mask_token_id in the model YAML "
                       "(126336 for LLaDA-8B-Instruct, 151666 for Dream-v0-Instruct-7B)"])
