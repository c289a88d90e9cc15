"""Sentence segmentation: lossless, deterministic, sensible boundaries, code blocks kept whole."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgen.requests.segment import SentenceSegmenter, code_block_spans, segment

# ------------------------------------------------------------------------------------------
# properties
# ------------------------------------------------------------------------------------------

_PIECES = st.sampled_from(
    [
        "Hello", "world", ".", "!", "?", " ", "  ", "\n", "\n\n", "\t", "e.g.", "i.e.", "etc.", "Dr.",
        "3.14", "v2.0", "np.sum(x)", "1. ", "- ", "    ", ">>> f(1)\n", "...", "```", "```python\n",
        "~~~", "<code>", "</code>", "# ", "A", "x", "\"", ")", "'", "(", "…", "Mr.", "No. 5", "é",
    ]
)
_TEXTS = st.one_of(st.text(max_size=200), st.lists(_PIECES, max_size=40).map("".join))


@settings(max_examples=300, deadline=None)
@given(_TEXTS)
def test_lossless_no_empty_deterministic(text: str) -> None:
    segs = segment(text)
    assert "".join(segs) == text
    assert all(segs), "empty segment"
    assert segment(text) == segs
    assert len(segs) == 0 or any(c.strip() for c in segs[0]) or len(segs) == 1


@settings(max_examples=300, deadline=None)
@given(_TEXTS)
def test_segments_other_than_first_start_with_content(text: str) -> None:
    """Boundaries sit at the end of whitespace: only the first segment may start with whitespace."""
    for s in segment(text)[1:]:
        assert not s[0].isspace(), s


@settings(max_examples=300, deadline=None)
@given(_TEXTS)
def test_rejoined_prefix_resegments_the_same(text: str) -> None:
    """Re-segmenting the concatenation of the first i segments gives back those i segments.

    This is what streaming needs: the request seen at arrival i cuts exactly as the full request.
    """
    segs = segment(text)
    for i in range(1, len(segs)):
        assert segment("".join(segs[:i])) == segs[:i]


@settings(max_examples=200, deadline=None)
@given(_TEXTS)
def test_fenced_blocks_never_split(text: str) -> None:
    _assert_blocks_whole(text, segment(text))


def _assert_blocks_whole(text: str, segs: list[str]) -> None:
    cuts, pos = set(), 0
    for s in segs[:-1]:
        pos += len(s)
        cuts.add(pos)
    for a, b in code_block_spans(text):
        assert not any(a < c < b for c in cuts), (text[a:b], segs)


# ------------------------------------------------------------------------------------------
# cases
# ------------------------------------------------------------------------------------------


def test_empty_and_whitespace() -> None:
    assert segment("") == []
    assert segment("   \n ") == ["   \n "]
    assert segment("Hi.") == ["Hi."]


def test_prose_sentences_keep_their_whitespace() -> None:
    assert segment("One. Two!  Three? Four") == ["One. ", "Two!  ", "Three? ", "Four"]


def test_closing_quotes_and_brackets_go_with_the_sentence() -> None:
    assert segment('He said "stop." Then (it ended.) Done') == ['He said "stop." ', "Then (it ended.) ", "Done"]


@pytest.mark.parametrize("abbr", ["e.g.", "i.e.", "vs.", "Dr.", "cf.", "Mr.", "(e.g."])
def test_abbreviations_do_not_end_sentences(abbr: str) -> None:
    assert segment(f"Use one {abbr} Smith here. Next.") == [f"Use one {abbr} Smith here. ", "Next."]


def test_etc_ends_a_sentence_only_before_a_capital() -> None:
    assert segment("Apples, pears etc. are fruit. Next.") == ["Apples, pears etc. are fruit. ", "Next."]
    assert segment("Apples, pears, etc. Next.") == ["Apples, pears, etc. ", "Next."]


def test_decimals_versions_attribute_access() -> None:
    text = "Pi is 3.14 in v2.0 and np.sum(x) or df.iloc[0].values works. Next one."
    assert segment(text) == ["Pi is 3.14 in v2.0 and np.sum(x) or df.iloc[0].values works. ", "Next one."]


def test_number_before_abbreviation_and_initials() -> None:
    assert segment("See Fig. 3 and No. 5 by J. Smith. Ok.") == ["See Fig. 3 and No. 5 by J. Smith. ", "Ok."]


def test_numbered_list_markers_are_not_sentence_ends() -> None:
    text = "Steps:\n1. Open the file\n2. Read it. Then close it\n10. Done"
    assert segment(text) == ["Steps:\n", "1. Open the file\n", "2. Read it. ", "Then close it\n", "10. Done"]


def test_bullets_and_headings() -> None:
    text = "# Title\nIntro text\n- first\n- second item\n\n## Part\nBody."
    assert segment(text) == ["# Title\n", "Intro text\n", "- first\n", "- second item\n\n", "## Part\n", "Body."]


def test_paragraph_break_is_a_boundary() -> None:
    assert segment("No punctuation here\n\nNext paragraph") == ["No punctuation here\n\n", "Next paragraph"]
    assert segment("a line\nwrapped") == ["a line\nwrapped"]


def test_fenced_block_is_one_segment() -> None:
    text = "Fix this code.\n```python\nx = 1. \n\nprint('Hi. There')\n```\nThen explain it. Briefly."
    assert segment(text) == [
        "Fix this code.\n",
        "```python\nx = 1. \n\nprint('Hi. There')\n```\n",
        "Then explain it. ",
        "Briefly.",
    ]


def test_tilde_fence_and_unclosed_fence() -> None:
    assert segment("A.\n~~~\na. b\n~~~\nB.") == ["A.\n", "~~~\na. b\n~~~\n", "B."]
    assert segment("A.\n```\nopen. block\n\nnever closed. ") == ["A.\n", "```\nopen. block\n\nnever closed. "]


def test_indented_code_block_is_one_segment() -> None:
    text = "Consider this code:\n\n    x = f(1). y\n\n    z = 2. w\n\nIt fails. Why?"
    assert segment(text) == ["Consider this code:\n\n    ", "x = f(1). y\n\n    z = 2. w\n\n", "It fails. ", "Why?"]


def test_code_body_after_def_is_not_an_indented_block() -> None:
    text = 'def f(x):\n\n    """Add one. Return it."""\n'
    assert segment(text) == ['def f(x):\n\n    ', '"""Add one. ', 'Return it."""\n']


def test_docstring_and_doctests() -> None:
    text = (
        "def f(x):\n"
        '    """ Return x plus one. Works on ints.\n'
        "    >>> f(1.)\n"
        "    2.0\n"
        "    >>> f('a. b')\n"
        "    Traceback (most recent call last). Error.\n"
        '    """\n'
    )
    assert segment(text) == [
        'def f(x):\n    """ Return x plus one. ',
        "Works on ints.\n    ",
        ">>> f(1.)\n    2.0\n    ",
        ">>> f('a. b')\n    Traceback (most recent call last). Error.\n    \"\"\"\n",
    ]


def test_markdown_emphasis_closers() -> None:
    assert segment("**Note.** Keep it. *Really.* Yes") == ["**Note.** ", "Keep it. ", "*Really.* ", "Yes"]


def test_html_code_block_is_one_segment() -> None:
    text = "Problem:\nDo it.\nA:\n<code>\nimport numpy as np\n\na = np.ones(3). b\n</code>\nresult = ...\n"
    segs = segment(text)
    assert "<code>\nimport numpy as np\n\na = np.ones(3). b\n</code>\n" in segs


def test_segmenter_protocol_value() -> None:
    assert SentenceSegmenter()("One. Two.") == ["One. ", "Two."]


def test_ellipsis_and_doctest_continuation() -> None:
    assert segment("Wait... what? Well... Yes.") == ["Wait... what? ", "Well... ", "Yes."]
    text = ">>> for i in range(2):\n...     print(i)\n0\n1\n"
    assert segment(text) == [text]


def test_fences_in_every_chat_like_answer_stay_whole() -> None:
    text = "Here.\n\n```\na. B\n\nc. D\n```\n\nAnd\n```js\nx. Y\n```"
    segs = segment(text)
    _assert_blocks_whole(text, segs)
    assert sum(1 for s in segs if re.match(r"^```", s)) == 2


# ------------------------------------------------------------------------------------------
# every request in the repository's data
# ------------------------------------------------------------------------------------------


def _rendered_requests() -> list[tuple[str, str]]:
    """(id, request) of every example of every benchmark, as the benchmark modules render them."""
    from streamgen.benchmarks import load_benchmark
    from streamgen.config import available, benchmark_config
    variants = [(n, []) for n in available("benchmarks")]
    variants += [("canitedit", ["options.instruction=lazy"]), ("chat", ["options.turn=1"])]
    out: list[tuple[str, str]] = []
    for name, overrides in variants:
        bench = load_benchmark(benchmark_config(name, overrides))
        out.extend((f"{name}:{e.example_id}", e.request) for e in bench.examples())
    return out


def test_every_rendered_request_in_the_data_is_lossless_with_blocks_whole() -> None:
    reqs = _rendered_requests()
    assert len(reqs) >= 164 + 974 + 427 + 2 * 105 + 1000 + 747 + 2 * 80
    fenced = 0
    for name, text in reqs:
        segs = segment(text)
        assert "".join(segs) == text, name
        assert all(segs), name
        _assert_blocks_whole(text, segs)
        for seg in segs:  # a fence opened in a segment is closed in the same segment
            opens = re.findall(r"^[ \t]{0,3}`{3,}", seg, re.MULTILINE)
            assert len(opens) % 2 == 0, (name, seg)
            fenced += len(opens) // 2
    assert fenced >= 974 + 427 + 2 * 105  # MBPP tests and CanItEdit programs are fenced


def test_printed_arrays_are_not_split_at_float_dots() -> None:
    text = "It prints:\narray([[3.5,   13. ,   28.5],\n       [-5. , -23. ]])\nWhy? It is 3. Then 4."
    assert segment(text) == ["It prints:\n", "array([[3.5,   13. ,   28.5],\n       [-5. , -23. ]])\nWhy? ",
                             "It is 3. ", "Then 4."]
