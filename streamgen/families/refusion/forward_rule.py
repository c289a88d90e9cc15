"""The ReFusion family's forward rule: the bound (docs/diffusion.md, docs/estimate.md).

Rounds depend on the model's confidences; the rule takes the bound: one slot per round (no slot passes
τ_slot: the plan then takes the most confident one) and one token verified per infill iteration, so a slot of
k positions costs plan + verify + (k − 1) × (predict + verify) = 2k forwards: 2 per position, over the blocks
up to the answer's end (it stops after the block holding EOS). Random tiny models decode exactly so; a
trained model commits several slots per round and tokens per iteration, so this over-counts it. A kept-whole
draft: 1 verify + the confirming round (2). No torch: the dry run and the estimate read it.
"""

from __future__ import annotations

import math
from typing import Any

from streamgen.config import ModelConfig
from streamgen.decoding.forwards import Decode, Forwards, Rule
from streamgen.families.refusion.settings import settings_from, slot_geometry, with_benchmark


def refusion(geometry: Any, slot_size: int, d: Decode) -> tuple[Forwards, ...]:
    """ReFusion (``geometry``: ``refusion.SlotGeometry``), the bound: a slot of k positions costs 2k forwards,
    so a decode costs 2 × the positions it fills (to the end of the block holding the answer's end)."""
    end = min(math.ceil(max(d.answer, 1) / geometry.block_length) * geometry.block_length, geometry.gen_length)
    if d.draft and d.accepted >= d.answer:
        return (Forwards(1, d.prompt + d.draft), Forwards(2, slot_size))  # verify + the confirming round
    if d.draft:
        return (Forwards(1, d.prompt + d.draft), Forwards(2 * max(end - d.accepted, 1), slot_size))
    return (Forwards(1, d.prompt + geometry.block_length), Forwards(2 * end - 1, slot_size))  # 1st plan: prefill


def refusion_shape(cfg: ModelConfig, benchmark: str, budget: int) -> tuple[Any, int]:
    """ReFusion's (slot geometry, slot size) for ``benchmark`` at ``budget``."""
    s = with_benchmark(settings_from(dict(cfg.decoding)), benchmark)
    return slot_geometry(s, budget), s.slot_size


def rule(cfg: ModelConfig, benchmark: str, budget: int) -> Rule:
    """The rule for one (model, benchmark, answer budget)."""
    geo, slot = refusion_shape(cfg, benchmark, budget)
    return lambda d: refusion(geo, slot, d)


def answer_positions(cfg: ModelConfig, benchmark: str, budget: int) -> int:
    """The most answer tokens a decode can produce: the slot geometry's ``gen_length``."""
    return int(refusion_shape(cfg, benchmark, budget)[0].gen_length)
