"""Forwards of one decode, per family, from the family's procedure: how many calls, how many tokens each.

Each family's rule lives in its folder (``streamgen/families/<family>/forward_rule.py``), taking the
decode's shape (:class:`~streamgen.decoding.forwards.Decode`: prompt tokens, the answer's length, and — for a
stream step — the incoming draft's length and the accepted run). With the accepted run known they reproduce
what the decoders do (docs/diffusion.md "What counts as a forward"): exact for autoregressive and
bidirectional (LLaDA / Dream), the bound for refusion and diffusion_gemma. This module finds the rule of a
model's family in the registry (:data:`streamgen.families.registry.FORWARD_RULES`).

The estimate (``jobs/grid/gpu_hours.py``) calls these with ``accepted = 0`` (it cannot know what will be kept):
an upper bound for every family, and exact for LLaDA / Dream whenever no kept run covers a whole block.
The answer's end is its EOS or the token completing a benchmark's stop string
(``streamgen.decoding.stops``; docs/accounting.md, "Stop strings"): the families stop at both alike, so
the rules hold with the answer length through either.
When the stream refill changes, change the family's rule; nothing else counts forwards.
"""

from __future__ import annotations

from streamgen.config import ModelConfig
from streamgen.decoding.forwards import Decode, Forwards, Rule, total_forwards
from streamgen.families.registry import DESCRIPTORS, FORWARD_RULES

__all__ = ["FORWARD_RULES", "Decode", "Forwards", "Rule", "answer_positions", "decode_rule", "total_forwards"]


def decode_rule(cfg: ModelConfig, benchmark: str, budget: int) -> Rule:
    """The forward rule of ``cfg``'s family for ``benchmark`` at answer budget ``budget``."""
    return FORWARD_RULES[cfg.family](cfg, benchmark, budget)


def answer_positions(cfg: ModelConfig, benchmark: str, budget: int) -> int:
    """The most answer tokens a decode of ``cfg`` can produce (its buffer, or the budget)."""
    positions = DESCRIPTORS[cfg.family].answer_positions
    return budget if positions is None else positions(cfg, benchmark, budget)
