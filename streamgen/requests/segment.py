"""Request → sentence segments: the units in which a request "arrives" while the user types.

The paper (§3) models composition as the arrival of successive sentences. :func:`segment` cuts a
request into such units, losslessly (``"".join(segment(text)) == text``) and deterministically.

Where boundaries go (each boundary sits at the end of a whitespace run, so the whitespace belongs to
the preceding segment and every segment ends at a natural arrival point):

- after sentence-final punctuation (``. ! ?`` plus closing quotes/brackets) followed by whitespace,
  except after abbreviations (``e.g. i.e. vs. Dr. etc.``), initials, numbered-list markers
  (``1. foo``), and inside doctest examples (``>>> f(1.)`` lines and their output);
- at paragraph breaks (a blank line), and after a line of prose that ends with a colon (``Problem:``,
  ``Fix the grammar in this sentence:``), but not after a code line such as ``def f(x):``;
- before each doctest example (a line starting with ``>>>``), each list item and each Markdown
  heading, and after a heading;
- around code blocks: a fenced block (```` ``` ```` or ``~~~``), an HTML ``<code>``/``<pre>`` block
  and a Markdown indented code block (indented ≥ 4 columns deeper than the preceding paragraph,
  after a blank line) are each exactly one segment, never split.

Decimals, versions and attribute access (``3.14``, ``v2.0``, ``np.sum(x)``) contain no whitespace
after the dot, so they never end a sentence. See ``docs/segmentation.md`` for statistics and traps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Segmenter", "SentenceSegmenter", "segment", "code_block_spans", "paragraph_breaks"]


class Segmenter(Protocol):
    """Cuts a request into arrival units; must be lossless and deterministic."""

    def __call__(self, text: str) -> list[str]: ...


# Abbreviations that never end a sentence (compared lower-case, without the final dot).
_NEVER_END = frozenset(
    "e.g i.e vs cf mr mrs ms dr prof st jr sr viz esp approx incl resp dept est al ca".split()
)
# Abbreviations that end a sentence only when the next word starts with an upper-case letter.
_SOFT_END = frozenset("etc a.m p.m u.s u.k".split())
# Abbreviations that never end a sentence when a number follows ("No. 5", "Fig. 3", "p. 12").
_BEFORE_NUMBER = frozenset("no nos fig figs eq eqs p pp vol sec ch art ex".split())

# No sentence starts with these: "13. ," in a printed array is not a sentence end.
_NEVER_STARTS = frozenset(",;:)]}")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d*)?")
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_HTML_OPEN = re.compile(r"^[ \t]*<(code|pre)>", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<![\s.!?])([.!?]+)([\"'”’)\]*_`]*)(\s+)")
_PARAGRAPH = re.compile(r"[ \t]*\n[ \t]*\n\s*")
_LIST_ITEM = re.compile(r"^[ \t]*(?:\d{1,3}[.)]|[-*+•])[ \t]+\S", re.MULTILINE)
_DOCTEST = re.compile(r"^[ \t]*>>>", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}[ \t]+\S[^\n]*\n?\s*", re.MULTILINE)
_COLON_EOL = re.compile(r"(?<=\S):[ \t]*\n\s*")
_CODE_OPENER = re.compile(r"^\s*(def|class|if|elif|else|for|while|with|try|except|finally|async)\b.*:\s*$")


@dataclass(frozen=True)
class _Line:
    start: int  # offset of the line's first character in the text
    text: str  # without the newline

    @property
    def indent(self) -> int:
        return len(self.text.expandtabs(4)) - len(self.text.expandtabs(4).lstrip(" "))

    @property
    def blank(self) -> bool:
        return not self.text.strip()

    @property
    def first_char(self) -> int:
        """Offset of the first non-blank character."""
        return self.start + len(self.text) - len(self.text.lstrip())


def _lines(text: str) -> list[_Line]:
    out, pos = [], 0
    for raw in text.splitlines(keepends=True):
        out.append(_Line(pos, raw.rstrip("\r\n")))
        pos += len(raw)
    return out


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _fence_end(lines: list[_Line], i: int, marker: str) -> int:
    """Index of the line closing the fence opened at line ``i`` (or the last line if unclosed)."""
    close = re.compile(rf"^[ \t]{{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
    for j in range(i + 1, len(lines)):
        if close.match(lines[j].text):
            return j
    return len(lines) - 1


def _html_end(lines: list[_Line], i: int, tag: str) -> int:
    closing = f"</{tag.lower()}>"
    if closing in lines[i].text.lower():
        return i
    for j in range(i + 1, len(lines)):
        if closing in lines[j].text.lower():
            return j
    return len(lines) - 1


def _indented_block_end(lines: list[_Line], i: int) -> int | None:
    """If line ``i`` opens a Markdown indented code block, the index of its last line."""
    if i == 0 or not lines[i - 1].blank or lines[i].blank:
        return None
    prev = next((ln for ln in reversed(lines[:i]) if not ln.blank), None)
    if prev is None or _CODE_OPENER.match(prev.text) or lines[i].text.lstrip().startswith(">>>"):
        return None
    depth = prev.indent + 4
    if lines[i].indent < depth:
        return None
    last = i
    for j in range(i + 1, len(lines)):
        if lines[j].blank:
            continue
        if lines[j].indent < depth:
            break
        last = j
    return last


def code_block_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every code block: fenced, HTML ``<code>``/``<pre>`` or indented.

    ``start`` is the block's first non-blank character; ``end`` includes the whitespace after it.
    """
    lines, spans, i = _lines(text), [], 0
    while i < len(lines):
        fence, html = _FENCE_OPEN.match(lines[i].text), _HTML_OPEN.match(lines[i].text)
        last: int | None
        if fence:
            last = _fence_end(lines, i, fence.group(1))
        elif html:
            last = _html_end(lines, i, html.group(1))
        else:
            last = _indented_block_end(lines, i)
        if last is None:
            i += 1
            continue
        end_line = lines[last]
        end = end_line.start + len(end_line.text)
        spans.append((lines[i].first_char, _skip_ws(text, end)))
        i = last + 1
    return spans


def paragraph_breaks(text: str) -> list[int]:
    """Where each paragraph break ends (the end of a blank-line run), outside code blocks and not at the
    text's end: the cuts :func:`segment` makes there, so every paragraph break is also a sentence boundary."""
    blocks = code_block_spans(text)
    return [m.end() for m in _PARAGRAPH.finditer(text)
            if m.end() < len(text) and not any(a <= m.start() < b for a, b in blocks)]


def _doctest_spans(text: str) -> list[tuple[int, int]]:
    """Doctest examples: a ``>>>`` line, its ``...`` continuations and its output (doctest rules)."""
    spans, lines, i = [], _lines(text), 0
    while i < len(lines):
        if not lines[i].text.lstrip().startswith(">>>"):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].blank and not lines[j].text.lstrip().startswith(">>>"):
            j += 1
        spans.append((lines[i].start, lines[j - 1].start + len(lines[j - 1].text)))
        i = j
    return spans


def _word_before(text: str, pos: int) -> str:
    """The whitespace-delimited word ending at ``pos``, without leading brackets or quotes."""
    start = pos
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:pos].lstrip("([{\"'“‘*_")


def _at_line_start(text: str, pos: int) -> bool:
    line_start = text.rfind("\n", 0, pos) + 1
    return not text[line_start:pos].strip()


def _is_sentence_end(text: str, m: re.Match[str]) -> bool:
    """Whether the punctuation matched by :data:`_SENTENCE_END` really ends a sentence."""
    punct, after = m.group(1), m.end()
    following = text[after] if after < len(text) else ""
    if following and following in _NEVER_STARTS:
        return False
    if punct != ".":
        if set(punct) == {"."}:  # an ellipsis: a break only before a capitalised word
            return following.isupper()
        return True
    word = _word_before(text, m.start(1))
    key = word.lower()
    if key in _NEVER_END:
        return False
    if key in _SOFT_END or ("." in key and len(key) <= 5 and key.replace(".", "").isalpha()):
        return following.isupper()
    if key in _BEFORE_NUMBER:
        return not following.isdigit()
    if len(word) == 1 and word.isupper():  # an initial: "J. Smith"
        return False
    if word.isdigit() and len(word) <= 3 and _at_line_start(text, m.start(1) - len(word)):
        return False  # a numbered-list marker: "1. foo"
    if _NUMBER.fullmatch(word) and not following.isupper():
        return False  # a float printed by numpy: "array([1. , 2. ])"
    return True


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in spans)


def _candidates(text: str) -> set[int]:
    """Every boundary the flow rules propose (before code blocks are taken into account)."""
    doctests = _doctest_spans(text)
    cuts = {m.end() for m in _PARAGRAPH.finditer(text)}
    for m in _SENTENCE_END.finditer(text):
        if not _inside(m.start(1), doctests) and _is_sentence_end(text, m):
            cuts.add(m.end())
    for m in _COLON_EOL.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if not _CODE_OPENER.match(text[line_start : m.start() + 1]) and not _inside(m.start(), doctests):
            cuts.add(m.end())
    for pattern in (_LIST_ITEM, _DOCTEST):
        cuts.update(_skip_ws(text, m.start()) for m in pattern.finditer(text))
    for m in _HEADING.finditer(text):
        cuts.update((m.start(), m.end()))
    return cuts


def segment(text: str) -> list[str]:
    """Split ``text`` into sentence segments; ``"".join(segment(text)) == text``.

    Deterministic and free of empty segments; ``segment("") == []``. A code block is one segment.
    """
    if not text:
        return []
    blocks = code_block_spans(text)
    cuts = {c for c in _candidates(text) if not any(a < c < b for a, b in blocks)}
    for a, b in blocks:
        cuts.update((a, b))
    leading_ws = _skip_ws(text, 0)  # leading whitespace joins the first real segment
    ordered = sorted(c for c in cuts if leading_ws < c < len(text))
    bounds = [0, *ordered, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


@dataclass(frozen=True)
class SentenceSegmenter:
    """The default :class:`Segmenter` (a value, so configs and tests can pass it around)."""

    def __call__(self, text: str) -> list[str]:
        return segment(text)
