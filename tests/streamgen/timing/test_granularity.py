"""Word and fixed-character granularity keep the segmenter's guarantees: lossless, deterministic,
no empty segment, code blocks whole."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from streamgen.config import ConfigError
from streamgen.requests.segment import SentenceSegmenter, code_block_spans
from streamgen.timing.granularity import CharsSegmenter, WordSegmenter, make_segmenter
from tests.streamgen.requests.test_segment import _TEXTS, _assert_blocks_whole

SEGMENTERS = [WordSegmenter(), CharsSegmenter(1), CharsSegmenter(7), CharsSegmenter(40)]


@settings(max_examples=200, deadline=None)
@given(_TEXTS)
@pytest.mark.parametrize("seg", SEGMENTERS, ids=lambda s: repr(s))
def test_lossless_no_empty_deterministic_blocks_whole(seg, text: str) -> None:  # type: ignore[no-untyped-def]
    segs = seg(text)
    assert "".join(segs) == text
    assert all(segs)
    assert seg(text) == segs
    _assert_blocks_whole(text, segs)


@settings(max_examples=200, deadline=None)
@given(_TEXTS)
def test_words_hold_one_word_outside_code(text: str) -> None:
    """Outside code blocks a word segment is non-space then whitespace: never two words."""
    blocks = set(code_block_spans(text))
    pos = 0
    for s in WordSegmenter()(text):
        span = (pos, pos + len(s))
        pos += len(s)
        if any(a < span[1] and span[0] < b for a, b in blocks):
            continue  # a code block (with any leading whitespace of the request)
        body = s.lstrip() if span[0] == 0 else s
        assert not any(c.isspace() for c in body.rstrip()), s


@settings(max_examples=200, deadline=None)
@given(_TEXTS)
def test_chunks_are_at_most_n_plus_trailing_whitespace(text: str) -> None:
    n = 7
    blocks = code_block_spans(text)
    pos = 0
    for s in CharsSegmenter(n)(text):
        if not any(a < pos + len(s) and pos < b for a, b in blocks):  # a code block is whole, any length
            assert len(s.strip() if pos == 0 else s.rstrip()) <= n, s  # the first also holds leading space
        pos += len(s)


def test_word_and_chars_by_hand() -> None:
    text = "One two.\n```\nx=1\n```\nThree."
    assert WordSegmenter()(text) == ["One ", "two.\n", "```\nx=1\n```\n", "Three."]
    assert CharsSegmenter(4)(text) == ["One ", "two.\n", "```\nx=1\n```\n", "Thre", "e."]
    assert make_segmenter("sentence")(text) == SentenceSegmenter()(text) == ["One two.\n", "```\nx=1\n```\n",
                                                                             "Three."]
    assert make_segmenter("chars", 4) == CharsSegmenter(4)


def test_bad_granularity_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="sentence"):
        make_segmenter("paragraph")
    with pytest.raises(ConfigError, match="segment_chars"):
        CharsSegmenter(0)
