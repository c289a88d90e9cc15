"""Where a stream answer first departs from its base answer, and which branch it then follows.

For a greedy pair of an autoregressive model the two answers are equal in exact arithmetic; where they
differ (docs/numerics.md) this names the first differing answer position, the top-2 margin there in
the base run and in the stream's final step (dtype spacings, from ``Generation.margins``), and whether
the stream's token there was an accepted draft token — then every later accepted token also came from
the draft, written before the request was complete (the draft branch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamgen.decoding.base import Generation


@dataclass(frozen=True)
class Divergence:
    """The first difference of one pair (``position`` None: the token sequences are equal)."""

    position: int | None
    base_margin: float | None  # dtype spacings; None where the family reports no margins
    stream_margin: float | None
    from_draft: bool | None  # the stream's token at ``position`` was an accepted draft token
    draft_tokens_after: int | None  # final stream tokens after ``position`` that came from the draft


EQUAL = Divergence(None, None, None, None, None)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """First index where ``a`` and ``b`` differ (a length difference counts); None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _at(margins: tuple[float, ...] | None, i: int) -> float | None:
    return margins[i] if margins is not None and i < len(margins) else None


def divergence(base: Generation, stream: Generation, accepted_final: int) -> Divergence:
    """The pair's first difference; ``accepted_final`` is the final step's accepted draft run (the
    stream answer's first ``accepted_final`` tokens are the draft's)."""
    p = first_difference(base.token_ids, stream.token_ids)
    if p is None:
        return EQUAL
    from_draft = p < accepted_final
    return Divergence(p, _at(base.margins, p), _at(stream.margins, p), from_draft,
                      accepted_final - p - 1 if from_draft else 0)
