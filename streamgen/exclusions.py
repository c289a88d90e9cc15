"""Exclusion rules (paper §4): why an example yields no comparison, decided before or after decoding.

Before decoding, a request of one segment has nothing to stream (:func:`exclusion_reason`); after it,
an empty base or stream answer excludes the example from all columns alike (:func:`empty_answer_reason`).
A leaf module, so both the benchmarks and the stream procedure use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence

SINGLE_SEGMENT = "single_segment"
"""``excluded_reason`` of a request that is one segment long (nothing to stream)."""
EMPTY_ANSWER = "empty_answer"
"""``excluded_reason`` prefix of an example where the base or the stream answer is empty."""


def exclusion_reason(example: object, segments: Sequence[str]) -> str | None:
    """Why ``example`` is excluded before decoding, or None (paper §4: one segment, nothing to stream)."""
    del example  # the rule does not depend on the benchmark; kept for a uniform call site
    if len(segments) <= 1:
        return SINGLE_SEGMENT
    return None


def empty_answer_reason(base_answer: str | None, stream_answer: str | None) -> str | None:
    """Why an example is excluded after decoding, or None: an empty answer on either side
    (paper §4) excludes the example from all columns alike."""
    empty = [side for side, ans in (("base", base_answer), ("stream", stream_answer)) if not (ans or "").strip()]
    if not empty:
        return None
    return f"{EMPTY_ANSWER}:{'+'.join(empty)}"
