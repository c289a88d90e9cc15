"""Code extraction from chat answers: fenced blocks, bare code, or a completion of the prompt.

Instruct models answer in prose with Markdown code fences, with bare code, or (asked to complete a
function) with only the function body. :func:`extract_code` turns any of these into the code to run:

1. ``fenced``: the Python-looking fenced blocks (```` ```python ````, ```` ```py ````, untagged,
   ``~~~``; an unclosed final fence counts, as a truncated answer ends that way). With an
   ``entry_point`` the first block defining it wins, otherwise the longest block.
2. ``bare``: no fence; the whole answer if it parses, else from the first line that starts code
   (``def``/``class``/``import``/``from``/``@``) down to the longest run that parses.
3. ``completion``: an ``entry_point`` and a ``prefix`` (the prompt's code) are given and the code
   does not define the entry point: it is the body of the prompt's function, so ``prefix + code``.

Nothing here executes code. Stop markers (DS-1000's ``</code>``, ``END SOLUTION``) cut the answer
before anything else.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Extracted", "extract_code", "extract_text", "fence", "fenced_blocks", "defines"]

How = Literal["fenced", "bare", "completion", "none"]
PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3", "pycon", "ipython"})
_FENCE_LINE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n`]*$")
_CODE_START = re.compile(r"^(def |class |import |from \S+ import |@|async def )")


@dataclass(frozen=True)
class Extracted:
    """The code to run and how it was found (``none``: the answer holds no code)."""

    code: str
    how: How


@dataclass(frozen=True)
class Block:
    """One fenced block: its info-string language tag (lower case) and its body."""

    lang: str
    body: str


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block in ``text`` in order; an unclosed fence runs to the end of the text."""
    blocks: list[Block] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        m = _FENCE_LINE.match(lines[i].rstrip("\r\n"))
        if not m:
            i += 1
            continue
        marker, body = m.group(1), []
        close = re.compile(rf"^[ \t]{{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
        i += 1
        while i < len(lines) and not close.match(lines[i].rstrip("\r\n")):
            body.append(lines[i])
            i += 1
        blocks.append(Block(m.group(2).lower(), "".join(body)))
        i += 1
    return blocks


def fence(code: str, lang: str = "python") -> str:
    """``code`` in a Markdown fence long enough not to be closed by backticks inside it."""
    longest = max((len(r) for r in re.findall(r"`{3,}", code)), default=2)
    ticks = "`" * max(3, longest + 1)
    body = code if code.endswith("\n") else code + "\n"
    return f"{ticks}{lang}\n{body}{ticks}"


def defines(code: str, name: str) -> bool:
    """Whether ``code`` defines ``name`` (a function, class or top-level assignment)."""
    pattern = rf"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+{re.escape(name)}\b|^{re.escape(name)}[ \t]*="
    return re.search(pattern, code, re.MULTILINE) is not None


def _parses(code: str) -> bool:
    """Whether ``code`` compiles (compiling, unlike ``ast.parse``, rejects a top-level ``return``;
    nothing is executed)."""
    try:
        compile(code, "<answer>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: NUL bytes
        return False
    return True


def _cut(text: str, stops: Sequence[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


def _pick(blocks: Sequence[Block], entry_point: str | None) -> str:
    code_blocks = [b.body for b in blocks if b.lang in PYTHON_TAGS] or [b.body for b in blocks]
    if entry_point:
        for body in code_blocks:
            if defines(body, entry_point):
                return body
    return max(code_blocks, key=len)


def _bare(text: str) -> str:
    """Bare code: the whole text if it parses, else the longest parsable run from the first code line."""
    stripped = text.strip("\n")
    if _parses(stripped):
        return stripped
    lines = stripped.splitlines()
    start = next((i for i, ln in enumerate(lines) if _CODE_START.match(ln)), None)
    if start is None:
        return stripped
    for end in range(len(lines), start, -1):
        candidate = "\n".join(lines[start:end])
        if _parses(candidate):
            return candidate
    return "\n".join(lines[start:])


def _complete(prefix: str, body: str) -> str:
    """The prompt followed by a function body; indents an unindented body by one level."""
    joined = prefix + body
    if _parses(joined) or body.startswith((" ", "\t")):
        return joined
    return prefix + textwrap.indent(body, "    ")


def extract_code(answer: str, *, entry_point: str | None = None, prefix: str = "",
                 stops: Sequence[str] = ()) -> Extracted:
    """The code in a chat ``answer`` (see the module docstring for the three ways)."""
    text = _cut(answer, stops)
    blocks = fenced_blocks(text)
    code, how = (_pick(blocks, entry_point), "fenced") if blocks else (_bare(text), "bare")
    if not code.strip():
        return Extracted("", "none")
    if entry_point and prefix and not defines(code, entry_point):
        return Extracted(_complete(prefix, code), "completion")
    return Extracted(code, how)  # type: ignore[arg-type]


def extract_text(answer: str) -> str:
    """A text answer (CoEdIT, chat): the answer without surrounding whitespace, or the body of
    the answer's only fenced block when it is nothing but that block."""
    stripped = answer.strip()
    blocks = fenced_blocks(stripped)
    if len(blocks) == 1 and _FENCE_LINE.match(stripped.splitlines()[0]) and stripped.endswith(("```", "~~~")):
        return blocks[0].body.strip()
    return stripped
