"""The autoregressive family's forward rule: exact given the answer length (docs/accounting.md).

1 forward (prefill, or verify + its next token), then 1 per further token; a kept-whole draft that ended
costs 1. No torch: the dry run and the estimate read it.
"""

from __future__ import annotations

from streamgen.config import ModelConfig
from streamgen.decoding.forwards import Decode, Forwards, Rule


def autoregressive(d: Decode) -> tuple[Forwards, ...]:
    """1 prefill / verify forward (it yields the next token), then one forward per further token."""
    first = d.fed if d.fed is not None else d.prompt + d.draft
    further = max(0, d.answer - d.accepted - 1)
    return (Forwards(1, first), Forwards(further, 1))


def rule(cfg: ModelConfig, benchmark: str, budget: int) -> Rule:
    """The rule for one (model, benchmark, answer budget): the same for every cell."""
    return autoregressive
