"""ReFusion's decode settings and slot geometry (the official ``generate_refusion`` knobs, docs/diffusion.md),
and the family's cell check: importable without torch, so a dry run plans and estimates without it
(the decoder itself: :mod:`streamgen.families.refusion.decoder`, which re-exports these names)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from streamgen.config import DIFFUSION_DEVIATIONS, ConfigError, ModelConfig


@dataclass(frozen=True)
class ReFusionSettings:
    """Decode settings (``decoding:`` in the model YAML). Defaults: the reference's GSM8K/HumanEval row and
    the official ``generate_refusion`` procedure (docs/diffusion.md)."""

    slot_size: int = 32
    serial_num_blocks: int = 4  # the official block count: block = (gen_length padded to a slot multiple) / blocks
    slot_threshold: float = 0.9
    token_threshold: float = 0.4
    gen_length: int | None = None  # the official generation length; None: the answer budget
    mask_token_id: int | None = None  # None: the tokenizer's <|mask|>
    eos_token_ids: tuple[int, ...] = ()  # extra end-of-answer ids besides the tokenizer's eos_token_id
    per_benchmark: dict[str, dict[str, Any]] = field(default_factory=dict)  # overrides by benchmark name
    # the project's differences from the official procedure, each off by default (DEVIATIONS)
    block_length: int | None = None
    cap_gen_length: bool = False
    stop_on_every_eos: bool = False
    suppress_mask_logit: bool = False


DEVIATIONS = DIFFUSION_DEVIATIONS["refusion"]
"""The project's differences from ``generate_refusion``: option → default (off). In the cell fingerprint.
One more is not an option: an EOS found during infill drops the slots after it, where the official code
counts from the row's index among the chosen slots and so also drops undecoded slots before it (a bug)."""


REFERENCE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gsm8k": {}, "humaneval": {}, "mbpp": {"token_threshold": 0.3},
    "minerva_math": {"serial_num_blocks": 8, "slot_threshold": 0.8, "token_threshold": 0.6},
    "gpqa": {"slot_size": 8, "serial_num_blocks": 32, "slot_threshold": 0.8, "token_threshold": 0.2},
    "arc_challenge": {"slot_size": 8, "serial_num_blocks": 64, "slot_threshold": 0.8, "token_threshold": 0.1},
    "mmlu_pro": {"slot_size": 16},
}
"""ReFusion's eval.sh settings per task (slot, serial blocks, τ_slot, τ_tok), gen length 512."""


@dataclass(frozen=True)
class SlotGeometry:
    """The buffer a ReFusion decoder runs: answer positions and block length."""

    gen_length: int
    block_length: int


def slot_geometry(s: ReFusionSettings, max_new_tokens: int, where: str = "decoding") -> SlotGeometry:
    """The official geometry: gen_length (the budget if unset) padded up to a multiple of the slot size,
    cut into ``serial_num_blocks`` blocks of whole slots; a ConfigError where the official code would
    fail (a block that is not whole slots) or leave positions undecoded (a length blocks do not divide)."""
    gen = int(s.gen_length or max_new_tokens)
    if s.cap_gen_length:
        gen = min(gen, int(max_new_tokens))
        if s.block_length is not None:  # the project's former geometry: no padding, a short last block
            return SlotGeometry(gen, min(s.block_length, gen))
    gen += (-gen) % s.slot_size
    if s.block_length is not None:
        return SlotGeometry(gen, min(s.block_length, gen))
    block, rest = divmod(gen, s.serial_num_blocks)
    if rest or block % s.slot_size:
        raise ConfigError([f"{where}: gen_length {gen} (padded to slots of {s.slot_size}) in serial_num_blocks="
                           f"{s.serial_num_blocks} blocks gives blocks of {gen / s.serial_num_blocks:g}, not whole "
                           "slots (the official code fails or leaves positions undecoded): choose "
                           "decoding.serial_num_blocks so that gen_length / blocks is a multiple of slot_size"])
    return SlotGeometry(gen, block)


def with_benchmark(s: ReFusionSettings, benchmark: str) -> ReFusionSettings:
    """``s`` with ``per_benchmark[benchmark]`` applied (the eval.sh row of that task); ``s`` itself if none."""
    extra = s.per_benchmark.get(benchmark)
    return replace(s, **extra) if extra else s


def settings_from(decoding: dict[str, Any], family: str = "refusion") -> ReFusionSettings:
    """Parse ``cfg.decoding``; unknown keys and bad values raise one :class:`ConfigError`."""
    known = {f.name for f in fields(ReFusionSettings)}
    problems = [f"decoding.{k} is not a {family} setting: known are {sorted(known)}" for k in decoding if k not in known]
    if problems:
        raise ConfigError(problems)
    s = ReFusionSettings(**{**decoding, "eos_token_ids": tuple(decoding.get("eos_token_ids", ()))})
    for name in ("slot_threshold", "token_threshold"):
        if not 0.0 <= getattr(s, name) <= 1.0:
            problems.append(f"decoding.{name}={getattr(s, name)} must be in [0, 1]")
    if s.slot_size < 1 or (s.block_length is not None and s.block_length < s.slot_size):
        problems.append(f"decoding.slot_size={s.slot_size} must be ≥ 1 and ≤ block_length={s.block_length}")
    if s.serial_num_blocks < 1:
        problems.append(f"decoding.serial_num_blocks={s.serial_num_blocks} must be ≥ 1")
    if s.gen_length is not None and s.gen_length < 1:
        problems.append(f"decoding.gen_length={s.gen_length} must be ≥ 1")
    for name, extra in s.per_benchmark.items():
        if unknown := sorted(set(extra) - known - {"per_benchmark"}):
            problems.append(f"decoding.per_benchmark.{name}: {unknown} are not {family} settings")
    if problems:
        raise ConfigError(problems)
    return s


def check(cfg: ModelConfig, max_new_tokens: int, benchmark: str) -> list[str]:
    """What would stop ``cfg`` decoding a (benchmark, budget) cell, found before a grid starts."""
    try:
        s = settings_from(dict(cfg.decoding))
        s = with_benchmark(s, benchmark)
        slot_geometry(s, max_new_tokens, where=f"model {cfg.name} on {benchmark} (budget {max_new_tokens})")
    except ConfigError as exc:
        return list(exc.problems)
    return []
