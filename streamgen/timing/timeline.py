"""Typing timelines: when each segment of a request arrives under a typing model (docs/design.md, 'Vocabulary').

A typist enters the request at ``rate`` characters per second. Two refinements, both config
(:class:`streamgen.config.TypingConfig`):

- **pasted code**: the characters of a code block (fenced, HTML or indented, as
  :func:`streamgen.requests.segment.code_block_spans` finds them) arrive at once, taking no typing time;
- **sentence pauses**: after every sentence end except the request's last (the sentence
  segmenter's boundaries), the typist pauses ``sentence_pause_s`` before typing on.

Segment i arrives when its last character is in: ``t_i = typed_chars_i / rate + pause · sentence_ends_i``
where ``typed_chars_i = prefix_chars_i − pasted_chars_i`` (pasted only when code is pasted) and
``sentence_ends_i`` counts sentence boundaries strictly inside prefix i. With no pauses and no
pasting this is the issue's ``t_i = prefix_chars_i / rate``. The counts are recorded on every step
row (``pasted_chars``, ``sentence_ends``), so the analysis recomputes arrivals for any rate without
the request text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamgen.requests.segment import code_block_spans, paragraph_breaks, segment

__all__ = ["PrefixCounts", "TypingModel", "prefix_counts", "arrival_times", "paragraph_ends"]


@dataclass(frozen=True)
class PrefixCounts:
    """What a typing model needs to know about prefix i of a request."""

    prefix_chars: int  # characters in segments 1..i
    pasted_chars: int  # of those, characters inside code blocks (pasted, not typed)
    sentence_ends: int  # sentence boundaries strictly inside the prefix (a pause follows each)
    paragraph_ends: int = 0  # of those, paragraph breaks (a typist population pauses longer there)


@dataclass(frozen=True)
class TypingModel:
    """One typing model: a rate, a pause per sentence end, and whether code is pasted."""

    chars_per_s: float
    sentence_pause_s: float = 0.0
    paste_code: bool = True

    def __post_init__(self) -> None:
        if not self.chars_per_s > 0 or not self.sentence_pause_s >= 0:
            raise ValueError(f"a typing model needs chars_per_s > 0 and sentence_pause_s ≥ 0, got {self}")

    def arrival(self, counts: PrefixCounts) -> float:
        """Seconds from the first keystroke until the prefix's last character is in."""
        typed = counts.prefix_chars - (counts.pasted_chars if self.paste_code else 0)
        return typed / self.chars_per_s + self.sentence_pause_s * counts.sentence_ends


def prefix_counts(segments: Sequence[str]) -> list[PrefixCounts]:
    """:class:`PrefixCounts` of prefixes 1..n of a segmented request (any granularity)."""
    text = "".join(segments)
    blocks = code_block_spans(text)
    sentence_cuts, pos = [], 0
    for s in segment(text)[:-1]:
        pos += len(s)
        sentence_cuts.append(pos)
    paragraphs = paragraph_ends(text, [sum(len(s) for s in segments[:i + 1]) for i in range(len(segments))])
    out, end = [], 0
    for s, para in zip(segments, paragraphs, strict=True):
        end += len(s)
        pasted = sum(max(0, min(b, end) - a) for a, b in blocks)
        out.append(PrefixCounts(end, pasted, sum(1 for c in sentence_cuts if c < end), para))
    return out


def arrival_times(segments: Sequence[str], model: TypingModel) -> tuple[float, ...]:
    """Arrival time (seconds after the first keystroke) of each segment under ``model``."""
    return tuple(model.arrival(c) for c in prefix_counts(segments))


def paragraph_ends(text: str, prefix_chars: Sequence[int]) -> list[int]:
    """Paragraph breaks of ``text`` strictly inside each prefix (as :func:`prefix_counts` counts them)."""
    cuts = paragraph_breaks(text)
    return [sum(1 for c in cuts if c < end) for end in prefix_chars]
