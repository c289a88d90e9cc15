"""LLaDA / Dream style masked diffusion with full attention, and its (degenerate) draft verification.

The answer is a buffer of ``gen_length`` positions after the request. Each denoising step is ONE
forward over request + the whole buffer (no KV cache: every position sees every other), and reveals
some masked positions of the current block:

- ``llada``: logits at ``i`` predict token ``i``; a linear schedule reveals ⌊m/s⌋ (+1 for the first
  m mod s steps) of a block's m masks per step, choosing by ``low_confidence`` remasking.
- ``dream``: logits at ``i-1`` predict token ``i`` (the one-position shift); the number revealed at
  step t→s is ``int(m·(1-s/t))`` over ``linspace(1, eps, steps+1)`` (all at the last step), chosen by
  ``entropy`` (negative entropy) or ``maskgit_plus`` (top probability).

Decoding stops after the block in which the first EOS is revealed (everything after it is padding).

Streaming verification is ONE forward over request + buffer, in two modes (``verifier_mode``):
``visible`` puts the draft in the buffer (each position can see its own token, so it is confirmed
whatever it is: paper §6.5), ``hidden`` masks the draft (the verdict is formed without the draft,
and without the context it needs). :func:`probe_unrelated` scores a draft that answers another
request and reports its median probability and accepted length.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from streamgen.chat import Message
from streamgen.config import ConfigError, ModelConfig
from streamgen.decoding import autoregressive
from streamgen.decoding.acceptance import (
    AcceptanceRule,
    Verification,
    accepted_length,
    draft_is_complete,
)
from streamgen.decoding.autoregressive import AutoregressiveDecoder
from streamgen.decoding.base import Family, Generation, StepResult
from streamgen.decoding.bidir_models import BIDIR_ARCHS, BidirLM
from streamgen.decoding.family import FamilyPlugin
from streamgen.decoding.over_text import OverText
from streamgen.weights import LoadedModel, load_model_and_tokenizer, torch_dtype

log = logging.getLogger(__name__)

STYLES = ("llada", "dream")
REMASKING = {"llada": ("low_confidence",), "dream": ("entropy", "maskgit_plus")}
VERIFIER_MODES = ("visible", "hidden")


@dataclass(frozen=True)
class BidirSettings:
    """Decode settings (``decoding:`` in the model YAML)."""

    style: str = "llada"  # llada (no shift) | dream (logits shifted by one)
    gen_length: int | None = None  # answer buffer; capped by the decoder's max_new_tokens
    block_length: int | None = None  # None: one block = the whole buffer (pure diffusion)
    tokens_per_step: int = 1  # steps per block = ceil(masked / tokens_per_step)
    steps: int | None = None  # LLaDA/Dream's total steps over the buffer; if set, tokens_per_step = ⌈gen/steps⌉
    remasking: str | None = None  # None: low_confidence (llada), entropy (dream)
    eps: float = 1e-3  # Dream's final timestep
    verifier_mode: str = "visible"  # visible | hidden (the ablation the grid sweeps)
    mask_token_id: int | None = None  # None: the model's (in-project spec) or the tokenizer's mask token
    eos_token_ids: tuple[int, ...] = ()  # extra end-of-answer ids (LLaDA: <|eot_id|> 126348 besides EOS)

    @property
    def alg(self) -> str:
        return self.remasking or REMASKING[self.style][0]


def bidir_settings_from(decoding: dict[str, Any]) -> BidirSettings:
    """Parse ``cfg.decoding``; unknown keys and bad values raise one :class:`ConfigError`."""
    known = {f.name for f in fields(BidirSettings)}
    problems = [f"decoding.{k} is not a bidirectional setting: known are {sorted(known)}" for k in decoding
                if k not in known]
    if problems:
        raise ConfigError(problems)
    s = BidirSettings(**{**decoding, "eos_token_ids": tuple(decoding.get("eos_token_ids", ()))})
    if s.style not in STYLES:
        problems.append(f"decoding.style={s.style!r} must be one of {STYLES}")
    elif s.alg not in REMASKING[s.style]:
        problems.append(f"decoding.remasking={s.remasking!r}: {s.style} supports {REMASKING[s.style]}")
    if s.verifier_mode not in VERIFIER_MODES:
        problems.append(f"decoding.verifier_mode={s.verifier_mode!r} must be visible or hidden")
    if s.tokens_per_step < 1 or (s.block_length is not None and s.block_length < 1) or (s.steps or 1) < 1:
        problems.append("decoding.tokens_per_step, decoding.steps and decoding.block_length must be ≥ 1")
    if problems:
        raise ConfigError(problems)
    return s


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
    """Request + answer buffer; ``None`` marks a masked answer position."""

    prompt: list[int]
    answer: list[int | None]

    def eos_pos(self, eos_ids: frozenset[int]) -> int | None:
        return next((i for i, t in enumerate(self.answer) if t is not None and t in eos_ids), None)


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
    min_residual_forwards = 2  # verify + one denoising step, always (docs/diffusion.md)

    def __init__(self, model: Any, tokenizer: Any, settings: BidirSettings, *, max_new_tokens: int = 256,
                 device: str = "cpu", text: AutoregressiveDecoder | None = None) -> None:
        self.text = text or AutoregressiveDecoder(model, tokenizer, max_new_tokens=max_new_tokens, device=device)
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        self.max_new_tokens = int(max_new_tokens)
        self.gen_length = min(int(settings.gen_length or max_new_tokens), int(max_new_tokens))
        self.block_length = min(int(settings.block_length or self.gen_length), self.gen_length)
        self.verifier_mode = settings.verifier_mode
        self.tokens_per_step = (math.ceil(self.gen_length / settings.steps) if settings.steps
                                else settings.tokens_per_step)
        self.shift = settings.style == "dream"
        self.meter = self.text.meter
        self.eos_ids = frozenset(self.text.eos_token_ids) | frozenset(int(t) for t in settings.eos_token_ids)
        self.mask_id = _mask_id(model, tokenizer, settings.mask_token_id)
        self.device = torch.device(device)

    # -- one forward ---------------------------------------------------------------------------

    def forward(self, buf: Buffer, kind: str) -> torch.Tensor:
        """ONE metered forward over request + buffer; returns (gen_length, vocab) logits aligned so that
        row ``j`` predicts answer position ``j`` (Dream's shift applied)."""
        ids = buf.prompt + [self.mask_id if t is None else t for t in buf.answer]
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        with self.meter.call(kind, len(ids)):
            logits = full_attention_logits(self.model, input_ids)[0].float()
        p = len(buf.prompt)
        rows = logits[p - 1:p - 1 + len(buf.answer)] if self.shift else logits[p:p + len(buf.answer)]
        rows = rows.clone()
        rows[:, self.mask_id] = float("-inf")
        return rows

    # -- denoising -----------------------------------------------------------------------------

    def _schedule(self, masked: int) -> list[int]:
        steps = max(1, math.ceil(masked / self.tokens_per_step))
        if self.settings.style == "llada":
            return [masked // steps + (1 if i < masked % steps else 0) for i in range(steps)]
        t = torch.linspace(1, self.settings.eps, steps + 1).tolist()
        out, left = [], masked
        for i in range(steps):
            n = left if i == steps - 1 else int(left * (1 - t[i + 1] / t[i]))
            out.append(n)
            left -= n
        return out

    def _reveal(self, buf: Buffer, logits: torch.Tensor, lo: int, hi: int, n: int) -> None:
        probs = logits.softmax(-1)
        if self.settings.alg == "entropy":
            conf = (probs * probs.clamp_min(1e-30).log()).sum(-1)  # negative entropy
        else:
            conf = probs.max(-1).values
        scores, x0 = conf.tolist(), probs.argmax(-1).tolist()  # one conversion each, not one per position
        cand = [j for j in range(lo, hi) if buf.answer[j] is None]
        for j in sorted(cand, key=lambda j: -scores[j])[:n]:
            buf.answer[j] = x0[j]

    def denoise(self, buf: Buffer) -> None:
        """Fill the masked positions block by block; stop after the block holding the first EOS."""
        for lo in range(0, self.gen_length, self.block_length):
            hi = min(lo + self.block_length, self.gen_length)
            masked = sum(t is None for t in buf.answer[lo:hi])
            if masked:
                for n in self._schedule(masked):
                    logits = self.forward(buf, "denoise")
                    if n:
                        self._reveal(buf, logits, lo, hi, n)
            if buf.eos_pos(self.eos_ids) is not None:
                return

    def confirm(self, buf: Buffer) -> None:
        """The denoising step that emits a fully accepted draft: one forward over request + buffer (the
        tail after the draft masked); its reveals would fall after the EOS, so none is kept. It makes
        the floor 2 (docs/diffusion.md)."""
        self.forward(buf, "denoise")

    def _generation(self, buf: Buffer, span: Any) -> Generation:
        eos = buf.eos_pos(self.eos_ids)
        end = self.gen_length if eos is None else eos + 1
        tokens = [int(t) for t in buf.answer[:end] if t is not None]
        assert len(tokens) == end, "decoding left a masked position before the answer's end"
        return Generation(tuple(tokens), self.text.decode_text(tokens), eos is not None, span.wall_s, span.meter)

    def _buffer(self, messages: Sequence[Message]) -> Buffer:
        prompt = self.text.render(messages)
        self.text.check_fits(len(prompt))
        return Buffer(prompt, [None] * self.gen_length)

    @torch.inference_mode()
    def generate(self, messages: Sequence[Message]) -> Generation:
        with self.meter.span() as span:  # rendering counts, as in every family (docs/accounting.md)
            buf = self._buffer(messages)
            self.denoise(buf)
        return self._generation(buf, span)

    @torch.inference_mode()
    def score(self, messages: Sequence[Message], draft: Sequence[int],
              mode: str | None = None) -> tuple[Verification, Buffer]:
        """ONE forward scoring ``draft`` at answer positions 0..n-1, draft visible or hidden (masked)."""
        mode = mode or self.verifier_mode
        buf = self._buffer(messages)
        if mode == "visible":
            buf.answer[: len(draft)] = [int(t) for t in draft]
        probs = self.forward(buf, f"verify_{mode}")[: len(draft)].softmax(-1)
        idx = torch.tensor(list(draft), dtype=torch.long, device=probs.device)
        ver = Verification(tuple(int(t) for t in probs.argmax(-1)),
                           tuple(float(p) for p in probs.gather(-1, idx[:, None])[:, 0]))
        return ver, buf

    def open_stream(self) -> BidirectionalSession:
        return BidirectionalSession(self)


class BidirectionalSession:
    """Stream steps: verify (1 forward, visible or hidden draft) → accept → re-mask the rest → denoise."""

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
                buf.answer = [*positions[:accepted], *([None] * (d.gen_length - accepted))]
                extra["verify_median_prob"] = verification.median_prob or 0.0  # positions is non-empty
            else:
                buf = d._buffer(messages)
            if draft_is_complete(positions, accepted, d.eos_ids, d.gen_length):
                d.confirm(buf)  # the draft is the answer; one denoising step emits it
            else:
                d.denoise(buf)
        answer = d._generation(buf, span)
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


# --------------------------------------------------------------------------------------------
# The family: its weight loader and decoder (streamgen.models lists FAMILY)
# --------------------------------------------------------------------------------------------


def _checkpoint_arch(cfg: ModelConfig) -> str:
    arch = cfg.tiny_arch if cfg.source == "tiny" else dict(cfg.decoding).get("style", "llada")
    return str(arch)


def load_weights(cfg: ModelConfig, device: str = "cpu") -> LoadedModel:
    """Tiny llada/dream → in-project :class:`BidirLM`; a tiny llama/qwen3/gemma3 → a full-mask stand-in;
    a hub id or folder → the checkpoint mapped into :class:`BidirLM` (hub code only with
    ``trust_remote_code: true``)."""
    from streamgen.decoding.bidir_models import (
        load_bidir_checkpoint,
        load_checkpoint_tokenizer,
        resolve_checkpoint_folder,
        tiny_bidir_model,
    )
    from streamgen.tokenizers import tiny_tokenizer

    if cfg.source == "scripted":
        return load_model_and_tokenizer(cfg, device)
    arch = _checkpoint_arch(cfg)
    dtype = torch_dtype(cfg.dtype)
    if cfg.source == "tiny" and arch in BIDIR_ARCHS:
        tok = tiny_tokenizer()
        mask = dict(cfg.decoding).get("mask_token_id") or len(tok) - 1
        model = tiny_bidir_model(arch, cfg.seed, len(tok), mask_token_id=int(mask),  # type: ignore[arg-type]
                                 eos_token_id=tok.eos_token_id)
        return LoadedModel(model.to(device=device, dtype=dtype).eval(), tok)
    if cfg.source == "tiny" or cfg.trust_remote_code:
        if cfg.trust_remote_code:
            log.warning("model %s: trust_remote_code is on: running the hub's modeling code", cfg.name)
            return _load_remote(cfg, device, dtype)
        return load_model_and_tokenizer(cfg, device)
    if cfg.source not in ("hub", "local"):
        raise ConfigError([f"model {cfg.name}: bidirectional checkpoints load from source hub or local, not {cfg.source}"])
    if arch not in BIDIR_ARCHS:
        raise ConfigError([f"model {cfg.name}: decoding.style={arch!r} must be llada or dream"])
    folder = resolve_checkpoint_folder(cfg.path, cfg.revision, cfg.source)
    model = load_bidir_checkpoint(arch, folder, dtype=dtype, device=device)  # type: ignore[arg-type]
    return LoadedModel(model, load_checkpoint_tokenizer(folder))


def _load_remote(cfg: ModelConfig, device: str, dtype: Any) -> LoadedModel:
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cfg.path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    model = AutoModel.from_pretrained(cfg.path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code,
                                      dtype=dtype)
    return LoadedModel(model.to(device).eval(), tok)


def build_decoder(cfg: ModelConfig, model: Any, tokenizer: Any, device: str,
                  max_new_tokens: int) -> BidirectionalDecoder:
    """A bidirectional decoder over loaded weights; an autoregressive one renders and meters for it."""
    text = autoregressive.build_decoder(cfg, model, tokenizer, device, max_new_tokens)
    return BidirectionalDecoder(model, tokenizer, bidir_settings_from(dict(cfg.decoding)),
                                max_new_tokens=max_new_tokens, device=device, text=text)


FAMILY = FamilyPlugin("bidirectional", build_decoder, load_weights)
"""LLaDA / Dream: in-project checkpoints (:func:`load_weights`), masked diffusion verified in one pass."""
