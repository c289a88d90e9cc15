"""Segment granularity: a request arrives by sentence (the default), by word, or in fixed chunks.

Every segmenter here keeps the guarantees of :mod:`streamgen.requests.segment`: lossless
(``"".join(segs) == text``), deterministic, no empty segment, and a code block (fenced, HTML,
indented: :func:`streamgen.requests.segment.code_block_spans`) is never split — a pasted block is one unit.

- ``word``: a boundary at the end of every whitespace run outside code blocks (a word keeps the
  whitespace after it; leading whitespace joins the first word), plus around each code block;
- ``chars``: outside code blocks, a boundary every ``n`` characters counted from the start of each
  prose run (a chunk may end mid-word: that is what a fixed character count means; a boundary that
  falls in whitespace moves to its end, so no segment is whitespace alone), plus around each code
  block.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from streamgen.config import GRANULARITIES, ConfigError
from streamgen.requests.segment import Segmenter, SentenceSegmenter, code_block_spans

__all__ = ["WordSegmenter", "CharsSegmenter", "make_segmenter"]

_WS_RUN = re.compile(r"\s+")


def _skip_ws(text: str, pos: int, end: int) -> int:
    while pos < end and text[pos].isspace():
        pos += 1
    return pos


def _cut(text: str, cuts_in: Callable[[int, int], set[int]]) -> list[str]:
    """Split ``text`` at the code-block edges plus ``cuts_in(a, b)`` for each prose run [a, b)."""
    if not text:
        return []
    blocks = code_block_spans(text)
    cuts: set[int] = set()
    prose_start = 0
    for a, b in blocks:
        cuts.update(cuts_in(prose_start, a))
        cuts.update((a, b))
        prose_start = b
    cuts.update(cuts_in(prose_start, len(text)))
    first = len(text) - len(text.lstrip())  # leading whitespace joins the first real segment
    bounds = [0, *sorted(c for c in cuts if first < c < len(text)), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


@dataclass(frozen=True)
class WordSegmenter:
    """One segment per word (with its trailing whitespace); code blocks whole."""

    def __call__(self, text: str) -> list[str]:
        def word_ends(a: int, b: int) -> set[int]:
            return {m.end() for m in _WS_RUN.finditer(text, a, b)}

        return _cut(text, word_ends)


@dataclass(frozen=True)
class CharsSegmenter:
    """Chunks of ``n`` characters outside code blocks; code blocks whole."""

    n: int = 40

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError([f"segment_chars={self.n} must be ≥ 1"], "bad granularity")

    def __call__(self, text: str) -> list[str]:
        def chunk_ends(a: int, b: int) -> set[int]:
            # a cut moves past the whitespace it lands in, so no segment is whitespace alone
            return {_skip_ws(text, c, b) for c in range(a + self.n, b, self.n)}

        return _cut(text, chunk_ends)


def make_segmenter(granularity: str = "sentence", segment_chars: int = 40) -> Segmenter:
    """The segmenter of a granularity name (``GridConfig.granularity``); unknown names raise."""
    if granularity == "sentence":
        return SentenceSegmenter()
    if granularity == "word":
        return WordSegmenter()
    if granularity == "chars":
        return CharsSegmenter(segment_chars)
    raise ConfigError([f"granularity={granularity!r} is not one of {GRANULARITIES}"], "bad granularity")
