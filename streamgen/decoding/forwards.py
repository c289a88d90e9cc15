"""What a forward rule speaks in: one decode's shape (:class:`Decode`) and the forwards it costs (:class:`Forwards`).

Each family's rule (``streamgen/families/<family>/forward_rule.py``) maps a :class:`Decode` to a tuple of
:class:`Forwards` from the family's procedure (docs/diffusion.md, "What counts as a forward");
:mod:`streamgen.sizing.forward_counts` finds the rule for a model. No torch: the dry run reads these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Decode", "Forwards", "Rule", "total_forwards"]


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
