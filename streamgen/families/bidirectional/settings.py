"""LLaDA / Dream decode settings and buffer geometry (the official samplers' knobs, docs/diffusion.md),
and the family's cell check: importable without torch, so a dry run plans and estimates without it
(the sampler itself: :mod:`streamgen.families.bidirectional.sampler`, which re-exports these names)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from streamgen.config import DIFFUSION_DEVIATIONS, ConfigError, ModelConfig

STYLES = ("llada", "dream")
REMASKING = {"llada": ("low_confidence",), "dream": ("entropy", "maskgit_plus", "topk_margin")}
VERIFIER_MODES = ("visible", "hidden")
DREAM_TOP_K = 50  # what Dream's diffusion_generate inherits from transformers' PretrainedConfig (4.46)

DEVIATIONS = DIFFUSION_DEVIATIONS["bidirectional"]
"""The project's differences from the official samplers: option → default (off). In the cell fingerprint."""


@dataclass(frozen=True)
class BidirSettings:
    """Decode settings (``decoding:`` in the model YAML). Defaults: the official samplers' procedure."""

    style: str = "llada"  # llada (no shift) | dream (logits shifted by one)
    gen_length: int | None = None  # the official generation length; None: the answer budget
    block_length: int | None = None  # None: the whole buffer (LLaDA's "pure diffusion"; Dream-v0 has no blocks)
    steps: int | None = None  # denoising steps over the whole buffer; None: gen_length (one token per step)
    remasking: str | None = None  # None: low_confidence (llada), entropy (dream)
    eps: float = 1e-3  # Dream's last timestep
    top_k: int | None = None  # Dream's confidence over the top_k logits; None: 50 (dream) / whole vocabulary (llada); 0: whole
    top_p: float | None = None  # Dream's nucleus filter before the confidence (applied at temperature 0 too)
    logits_inf_ids: tuple[int, ...] = ()  # LLaDA logits_eos_inf: these logits are -inf before the argmax
    confidence_inf_ids: tuple[int, ...] = ()  # LLaDA confidence_eos_eot_inf: these logits are -inf in the confidence
    verifier_mode: str = "visible"  # visible | hidden (the ablation the grid sweeps)
    mask_token_id: int | None = None  # None: the model's (in-project spec) or the tokenizer's mask token
    eos_token_ids: tuple[int, ...] = ()  # extra end-of-answer ids (LLaDA: <|eot_id|> 126348 besides EOS)
    per_benchmark: dict[str, dict[str, Any]] = field(default_factory=dict)  # overrides by benchmark name
    cap_gen_length: bool = False
    stop_after_eos_block: bool = False
    suppress_mask_logit: bool = False
    fixed_prompt_masks: bool = False
    full_block_refill: bool = False  # a partly masked block runs its whole step schedule (not the official rate)
    refill_after_eos: bool = False  # the positions after a kept draft's EOS are masked and decoded again

    @property
    def alg(self) -> str:
        return self.remasking or REMASKING[self.style][0]

    @property
    def confidence_top_k(self) -> int | None:
        """The top-k filter of the confidence (None: the whole vocabulary)."""
        if self.top_k is None:
            return DREAM_TOP_K if self.style == "dream" else None
        return self.top_k or None


_TUPLES = ("eos_token_ids", "logits_inf_ids", "confidence_inf_ids")


def bidir_settings_from(decoding: dict[str, Any]) -> BidirSettings:
    """Parse ``cfg.decoding``; unknown keys and bad values raise one :class:`ConfigError`."""
    known = {f.name for f in fields(BidirSettings)}
    problems = [f"decoding.{k} is not a bidirectional setting: known are {sorted(known)}" for k in decoding
                if k not in known]
    if "tokens_per_step" in decoding:
        problems.append("decoding.tokens_per_step was replaced by decoding.steps (the official total: "
                        "steps = gen_length / tokens_per_step)")
    if problems:
        raise ConfigError(problems)
    s = BidirSettings(**{**decoding, **{k: tuple(decoding.get(k, ())) for k in _TUPLES}})
    problems = settings_problems(s)
    for name, extra in s.per_benchmark.items():
        unknown = sorted(set(extra) - known - {"per_benchmark"})
        if unknown:
            problems.append(f"decoding.per_benchmark.{name}: {unknown} are not bidirectional settings")
    if problems:
        raise ConfigError(problems)
    return s


def with_benchmark(s: BidirSettings, benchmark: str) -> BidirSettings:
    """``s`` with ``per_benchmark[benchmark]`` applied (the official eval scripts' per-task rows)."""
    extra: dict[str, Any] = dict(s.per_benchmark.get(benchmark) or {})
    if not extra:
        return s
    values: dict[str, Any] = {k: tuple(v) if k in _TUPLES else v for k, v in extra.items()}
    return replace(s, **values)


def settings_problems(s: BidirSettings) -> list[str]:
    p: list[str] = []
    if s.style not in STYLES:
        p.append(f"decoding.style={s.style!r} must be one of {STYLES}")
    elif s.alg not in REMASKING[s.style]:
        p.append(f"decoding.remasking={s.remasking!r}: {s.style} supports {REMASKING[s.style]} "
                 "(the random orders, LLaDA's 'random' and Dream's 'origin', are not reproducible)")
    for name in ("full_block_refill", "refill_after_eos"):
        if not isinstance(getattr(s, name), bool):
            p.append(f"decoding.{name}={getattr(s, name)!r} must be true or false (docs/diffusion.md: "
                     "off is the official rate and the answer's end; on is the earlier refill)")
    if s.verifier_mode not in VERIFIER_MODES:
        p.append(f"decoding.verifier_mode={s.verifier_mode!r} must be visible or hidden")
    for name in ("gen_length", "block_length", "steps"):
        if getattr(s, name) is not None and getattr(s, name) < 1:
            p.append(f"decoding.{name}={getattr(s, name)} must be ≥ 1 (or null)")
    if s.top_k is not None and s.top_k < 0:
        p.append(f"decoding.top_k={s.top_k} must be ≥ 0 (0: the whole vocabulary)")
    if s.top_p is not None and not 0.0 < s.top_p <= 1.0:
        p.append(f"decoding.top_p={s.top_p} must be in (0, 1]")
    if not 0.0 < s.eps < 1.0:
        p.append(f"decoding.eps={s.eps} must be in (0, 1)")
    return p


@dataclass(frozen=True)
class Geometry:
    """The buffer a decoder runs: positions, block length and denoising steps per block."""

    gen_length: int
    block_length: int
    steps_per_block: int

    @property
    def num_blocks(self) -> int:
        return self.gen_length // self.block_length

    @property
    def steps(self) -> int:
        return self.steps_per_block * self.num_blocks


def geometry(s: BidirSettings, max_new_tokens: int, where: str = "decoding") -> Geometry:
    """The official geometry for a budget of ``max_new_tokens``; a ConfigError where the official sampler
    would refuse it (gen_length not a multiple of block_length, steps not a multiple of the blocks)."""
    gen = int(s.gen_length or max_new_tokens)
    if s.cap_gen_length:
        gen = min(gen, int(max_new_tokens))
    block = int(s.block_length or gen)
    steps = int(s.steps or gen)
    p = []
    if gen % block:
        p.append(f"{where}: gen_length {gen} is not a multiple of block_length {block} (LLaDA's sampler asserts "
                 "it): set decoding.block_length to a divisor of it, or decoding.gen_length")
    elif steps % (gen // block):
        p.append(f"{where}: steps {steps} is not a multiple of the {gen // block} blocks of {block} "
                 "(the official samplers assert it): set decoding.steps to a multiple")
    if p:
        raise ConfigError(p)
    return Geometry(gen, block, steps // (gen // block))


def refill_steps(masked: int, block_length: int, steps_per_block: int) -> int:
    """Denoising steps for a block with ``masked`` of its ``block_length`` positions masked: the official
    rate, ``ceil(masked * steps_per_block / block_length)`` (all of them for a fully masked block, as in a
    base run; one for a single masked position of a block of 8 at 4 steps; none when nothing is masked)."""
    return -(-masked * steps_per_block // block_length)


def llada_transfer_counts(masked: int, steps: int) -> list[int]:
    """LLaDA's linear schedule: ``masked // steps`` per step, one more for the first ``masked % steps``."""
    base, extra = divmod(masked, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def check(cfg: ModelConfig, max_new_tokens: int, benchmark: str) -> list[str]:
    """What would stop ``cfg`` decoding a (benchmark, budget) cell, found before a grid starts."""
    try:
        settings = with_benchmark(bidir_settings_from(dict(cfg.decoding)), benchmark)
        geometry(settings, max_new_tokens, where=f"model {cfg.name} on {benchmark} (budget {max_new_tokens})")
    except ConfigError as exc:
        return list(exc.problems)
    return []
