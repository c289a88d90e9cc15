"""The bidirectional family's (LLaDA / Dream) forward rule: exact (docs/diffusion.md, docs/estimate.md).

A decode is ``steps`` forwards over prompt + ``gen_length`` (every block is filled). A stream step with a
draft: 1 verify, then ``steps_per_block`` forwards for every block still holding a masked position, or 1
confirming forward when the kept run fills the buffer. No torch: the dry run and the estimate read it.
"""

from __future__ import annotations

import math
from typing import Any

from streamgen.config import ModelConfig
from streamgen.decoding.forwards import Decode, Forwards, Rule
from streamgen.families.bidirectional.settings import bidir_settings_from, with_benchmark
from streamgen.families.bidirectional.settings import geometry as buffer_geometry


def bidirectional(geometry: Any, d: Decode, *, full_block_refill: bool = False,
                  refill_after_eos: bool = False) -> tuple[Forwards, ...]:
    """LLaDA / Dream (``geometry``: ``sampler.Geometry``); every forward is prompt + gen_length.

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


def bidir_geometry(cfg: ModelConfig, benchmark: str, budget: int) -> Any:
    return buffer_geometry(with_benchmark(bidir_settings_from(dict(cfg.decoding)), benchmark), budget)


def rule(cfg: ModelConfig, benchmark: str, budget: int) -> Rule:
    """The rule for one (model, benchmark, answer budget), with the model's refill options."""
    geo, s = bidir_geometry(cfg, benchmark, budget), bidir_settings_from(dict(cfg.decoding))
    return lambda d: bidirectional(geo, d, full_block_refill=s.full_block_refill, refill_after_eos=s.refill_after_eos)


def answer_positions(cfg: ModelConfig, benchmark: str, budget: int) -> int:
    """The most answer tokens a decode can produce: the buffer's ``gen_length``."""
    return int(bidir_geometry(cfg, benchmark, budget).gen_length)
