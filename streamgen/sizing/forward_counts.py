"""Forwards of one decode, per family, from the family's procedure: how many calls, how many tokens each.

One small function per family (``FORWARD_RULES``), each taking the decode's shape: prompt tokens, the
answer's length, and — for a stream step — the incoming draft's length and the accepted run. With the
accepted run known they reproduce what the decoders do (docs/diffusion.md "What counts as a forward"):

- **bidirectional** (LLaDA / Dream): exact. A decode is ``steps`` forwards over prompt + ``gen_length``
  (every block is filled). A stream step with a draft: 1 verify, then ``steps_per_block`` forwards for
  every block still holding a masked position, or 1 confirming forward when the kept run fills the buffer.
- **autoregressive**: exact given the answer length: 1 forward (prefill, or verify + its next token),
  then 1 per further token; a kept-whole draft that ended costs 1.
- **refusion**: rounds depend on the model's confidences; the rule takes the bound: one slot per round
  (no slot passes τ_slot: the plan then takes the most confident one) and one token verified per infill
  iteration, so a slot of k positions costs plan + verify + (k − 1) × (predict + verify) = 2k forwards:
  2 per position, over the blocks up to the answer's end (it stops after the block holding EOS). Random tiny models decode
  exactly so; a trained model commits several slots per round and tokens per iteration, so this
  over-counts it (docs/estimate.md). A kept-whole draft: 1 verify + the confirming round (2).
- **diffusion_gemma**: canvases up to the one holding EOS, each 1 encoder call + ``steps`` decoder calls
  (the stopping rule may end a canvas earlier: ``steps`` is the bound); a stream step: the verify pair
  (encoder + decoder), then the canvases from the first rejected one, or ``s_min`` confirming calls.

The estimate (``jobs/estimate.py``) calls these with ``accepted = 0`` (it cannot know what will be kept):
an upper bound for every family, and exact for LLaDA / Dream whenever no kept run covers a whole block.
The answer's end is its EOS or the token completing a benchmark's stop string
(``streamgen.decoding.stops``; docs/accounting.md, "Stop strings"): the families stop at both alike, so
the rules hold with the answer length through either.
When the stream refill changes, change the family's function here; nothing else counts forwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamgen.config import ModelConfig

__all__ = ["FORWARD_RULES", "Decode", "Forwards", "decode_rule", "total_forwards"]

DG_DEFAULT_STEPS = 48  # transformers' DiffusionGemma default max_denoising_steps
DG_HUB_CANVAS = 256  # google/diffusiongemma-26B-A4B-it's canvas_length


@dataclass(frozen=True)
class Forwards:
    """``count`` forwards, each feeding ``tokens`` tokens."""

    count: int
    tokens: int


@dataclass(frozen=True)
class Decode:
    """One decode (a base run or one stream step): prompt tokens, answer tokens produced, and for a
    stream step the incoming draft's tokens and how many of them were kept (0/0: no draft)."""

    prompt: int
    answer: int
    draft: int = 0
    accepted: int = 0
    fed: int | None = None  # tokens the first forward feeds when a cache holds the rest (autoregressive)


Rule = Callable[[Decode], tuple[Forwards, ...]]


def total_forwards(work: Sequence[Forwards]) -> int:
    return sum(f.count for f in work)


def autoregressive(d: Decode) -> tuple[Forwards, ...]:
    """1 prefill / verify forward (it yields the next token), then one forward per further token."""
    first = d.fed if d.fed is not None else d.prompt + d.draft
    further = max(0, d.answer - d.accepted - 1)
    return (Forwards(1, first), Forwards(further, 1))


def bidirectional(geometry: Any, d: Decode, *, full_block_refill: bool = False,
                  refill_after_eos: bool = False) -> tuple[Forwards, ...]:
    """LLaDA / Dream (``geometry``: ``bidir_sampler.Geometry``); every forward is prompt + gen_length.

    A stream step verifies its draft (the answer and its EOS, docs/diffusion.md) in one forward; a draft
    kept whole costs one more step (the floor); otherwise every position from the first rejected one is
    masked and a block with m of its B positions masked runs ceil(m · steps_per_block / B) steps (the
    official rate). ``full_block_refill``: such a block runs all its steps; ``refill_after_eos``: a kept
    draft's tail after its EOS is masked and decoded again (the two earlier rules, named options)."""
    width = d.prompt + geometry.gen_length
    if not d.draft:
        return (Forwards(geometry.steps, width),)
    if d.accepted >= geometry.gen_length or (d.accepted >= d.draft and not refill_after_eos):
        return (Forwards(2, width),)  # verify + the confirming step
    size, per_block = geometry.block_length, geometry.steps_per_block
    steps = 0
    for block in range(d.accepted // size, geometry.num_blocks):
        masked = min(size, (block + 1) * size - d.accepted)
        steps += per_block if full_block_refill else math.ceil(masked * per_block / size)
    return (Forwards(1, width), Forwards(steps, width))


def refusion(geometry: Any, slot_size: int, d: Decode) -> tuple[Forwards, ...]:
    """ReFusion (``geometry``: ``refusion.SlotGeometry``), the bound: a slot of k positions costs 2k forwards,
    so a decode costs 2 × the positions it fills (to the end of the block holding the answer's end)."""
    end = min(math.ceil(max(d.answer, 1) / geometry.block_length) * geometry.block_length, geometry.gen_length)
    if d.draft and d.accepted >= d.answer:
        return (Forwards(1, d.prompt + d.draft), Forwards(2, slot_size))  # verify + the confirming round
    if d.draft:
        return (Forwards(1, d.prompt + d.draft), Forwards(2 * max(end - d.accepted, 1), slot_size))
    return (Forwards(1, d.prompt + geometry.block_length), Forwards(2 * end - 1, slot_size))  # 1st plan: prefill


def diffusion_gemma(canvas: int, steps: int, s_min: int, d: Decode) -> tuple[Forwards, ...]:
    """DiffusionGemma: canvases up to the answer's end, ``steps`` decoder calls each and an encoder call
    before each (the request before the first, the finished canvas before the others)."""
    canvases = math.ceil(max(d.answer, 1) / canvas)
    if not d.draft:
        return (Forwards(1, d.prompt), Forwards(canvases - 1, canvas), Forwards(canvases * steps, canvas))
    blocks = math.ceil(d.draft / canvas)
    verify = (Forwards(1, d.prompt + d.draft), Forwards(1, blocks * canvas))  # encoder + decoder halves
    if d.accepted >= d.draft:
        return (*verify, Forwards(s_min, canvas))  # the confirming canvas
    left = canvases - d.accepted // canvas  # from the canvas of the first rejected position
    return (*verify, Forwards(left - 1, canvas), Forwards(left * steps, canvas))


def _bidir_geometry(cfg: ModelConfig, benchmark: str, budget: int) -> Any:
    from streamgen.families.bidirectional.settings import bidir_settings_from, geometry, with_benchmark

    return geometry(with_benchmark(bidir_settings_from(dict(cfg.decoding)), benchmark), budget)


def _refusion_shape(cfg: ModelConfig, benchmark: str, budget: int) -> tuple[Any, int]:
    """ReFusion's (slot geometry, slot size) for ``benchmark`` at ``budget``."""
    from streamgen.families.refusion.settings import settings_from, slot_geometry, with_benchmark

    s = with_benchmark(settings_from(dict(cfg.decoding)), benchmark)
    return slot_geometry(s, budget), s.slot_size


def _bidirectional_rule(cfg: ModelConfig, benchmark: str, budget: int) -> Rule:
    from streamgen.families.bidirectional.settings import bidir_settings_from

    geo, s = _bidir_geometry(cfg, benchmark, budget), bidir_settings_from(dict(cfg.decoding))
    return lambda d: bidirectional(geo, d, full_block_refill=s.full_block_refill, refill_after_eos=s.refill_after_eos)


def _refusion_rule(cfg: ModelConfig, benchmark: str, budget: int) -> Rule:
    geo, slot = _refusion_shape(cfg, benchmark, budget)
    return lambda d: refusion(geo, slot, d)


def dg_shape(cfg: ModelConfig) -> tuple[int, int, int]:
    """DiffusionGemma's (canvas length, max denoising steps, s_min) for ``cfg`` (docs/diffusion.md)."""
    from streamgen.families.diffusion_gemma.decoder import TINY_CANVAS, dg_settings_from
    from streamgen.models.scripted import SCRIPTED_CANVAS

    s = dg_settings_from(dict(cfg.decoding))
    steps = int(s.max_denoising_steps or DG_DEFAULT_STEPS)
    s_min = min(int(s.stability_threshold if s.stability_threshold is not None else 1) + 1, steps)
    canvas = {"tiny": TINY_CANVAS, "scripted": SCRIPTED_CANVAS}.get(cfg.source, DG_HUB_CANVAS)
    return canvas, steps, s_min


def _diffusion_gemma_rule(cfg: ModelConfig, benchmark: str, budget: int) -> Rule:
    canvas, steps, s_min = dg_shape(cfg)  # every canvas assumed to run all its steps: the bound
    return lambda d: diffusion_gemma(canvas, steps, s_min, d)


FORWARD_RULES: dict[str, Callable[[ModelConfig, str, int], Rule]] = {
    "autoregressive": lambda cfg, benchmark, budget: autoregressive,
    "bidirectional": _bidirectional_rule,
    "refusion": _refusion_rule,
    "diffusion_gemma": _diffusion_gemma_rule,
}
"""Family → builder of its rule for one (model, benchmark, answer budget)."""


def decode_rule(cfg: ModelConfig, benchmark: str, budget: int) -> Rule:
    """The forward rule of ``cfg``'s family for ``benchmark`` at answer budget ``budget``."""
    return FORWARD_RULES[cfg.family](cfg, benchmark, budget)


def answer_positions(cfg: ModelConfig, benchmark: str, budget: int) -> int:
    """The most answer tokens a decode of ``cfg`` can produce (its buffer, or the budget)."""
    if cfg.family == "bidirectional":
        return int(_bidir_geometry(cfg, benchmark, budget).gen_length)
    if cfg.family == "refusion":
        return int(_refusion_shape(cfg, benchmark, budget)[0].gen_length)
    return budget
