"""Every reference to a file points at a file the repository holds (issue 40: a clone alone can follow them).

Scanned: the tracked text files (``git ls-files``; .py .md .yaml .sql .toml .sh); of a .py file only its
comments and docstrings, the prose (a path in a string literal is data the code uses, often a file a test
creates, and the code's own tests exercise it); not ``data/*/SOURCE.md``, whose paths name files in the
upstream repositories the data came from. Three kinds of reference:

(a) a markdown link ``[text](path)`` in a .md file, resolved relative to that file (web links,
    ``mailto:`` and anchors within the page are not paths);
(b) a path written out from the repository root, ``dir/…/name.ext``, whose first part is one of the
    repository's top-level directories — in backticks or plain text. A path with a glob or a
    placeholder in it (``* ? < > { } $``, ``...``, a capitalised word such as ``NAME`` or ``NNNN``)
    names no one file and is skipped, and so is a path inside a longer one (``/tmp/x/docs/a.md``,
    ``my_docs/a.md``) and a folder without a file name (``streamgen/``);
(c) the names of the design notes that lived outside the repository (built below so this file does
    not name them itself): their content is docs/design.md now.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".py", ".md", ".yaml", ".sql", ".toml", ".sh")
TOP_DIRS = ("streamgen", "jobs", "analysis", "workflows", "docs", "configs", "tests", "bench", "scripts",
            "data", "baselines", ".ci")
OUTSIDE_DOCS = tuple(a + b for a, b in [("DESIGN", " §"), ("DESIGN", ".md"), ("STYLE", " habit"),
                                        ("STYLE", ".md"), ("reference/", "decoders")])

MD_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# a path token starts at a top-level directory not preceded by a path character, and runs to a space,
# quote, bracket or separator; ':' ends it too (x.py::test_name, x.py:12)
TOP_ALTERNATIVES = "|".join(re.escape(d) for d in TOP_DIRS)
PATH_TOKEN = re.compile(r"(?<![\w./~-])((?:" + TOP_ALTERNATIVES + r")/[^\s`'\"()\[\],;:|]*)")
PLACEHOLDER = re.compile(r"[*?<>{}$…]|\.\.\.|\b(?:NAME|DIR|OUT|SITE|N{2,}|X{2,})\b")
HAS_SUFFIX = re.compile(r"/[^/]*[\w-]\.[A-Za-z0-9]+$")


class Broken(NamedTuple):
    """One reference to a file the repository does not hold."""

    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


PROVENANCE = re.compile(r"^data/.+/SOURCE\.md$")


def tracked_files(root: Path = ROOT) -> list[str]:
    """The text files git tracks under ``root`` (relative paths), of the scanned suffixes."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return sorted(p for p in out.decode().split("\0") if p.endswith(SUFFIXES) and not PROVENANCE.match(p))


def prose_lines(rel: str, text: str) -> list[tuple[int, str]]:
    """(line number, text) of what a reader reads as prose: every line, or a .py file's comments and docstrings."""
    if not rel.endswith(".py"):
        return list(enumerate(text.splitlines(), 1))
    lines: list[tuple[int, str]] = []
    statement_start = True  # a string token that opens a statement is a docstring (or a bare string)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and statement_start):
            lines.extend(enumerate(tok.string.splitlines(), tok.start[0]))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            statement_start = tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    return lines


def _link_target(target: str) -> str | None:
    """The file part of a markdown link target, or None when it names no file in the repository."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None  # http(s)://, mailto:, an anchor in this page, an absolute path on some machine
    return target.split("#", 1)[0] or None


def _path_mentions(line: str) -> Iterator[str]:
    """Root-relative file paths written in ``line``, placeholders and globs left out."""
    for match in PATH_TOKEN.finditer(line):
        token = match.group(1).rstrip(".")
        token = token.split("#", 1)[0]
        if PLACEHOLDER.search(token) or not HAS_SUFFIX.search(token):
            continue
        yield token


def broken_in(rel: str, text: str, root: Path = ROOT) -> Iterator[Broken]:
    """Every broken reference in the file ``rel`` whose content is ``text``."""
    base = (root / rel).parent
    for number, line in prose_lines(rel, text):
        shown = line.strip()
        if rel.endswith(".md"):
            for target in filter(None, map(_link_target, MD_LINK.findall(line))):
                if not (base / target).exists():
                    yield Broken(rel, number, shown)
        if any(not (root / p).exists() for p in _path_mentions(line)):
            yield Broken(rel, number, shown)
        if any(word in line for word in OUTSIDE_DOCS):
            yield Broken(rel, number, shown)


def broken_references(files: Iterable[str], root: Path = ROOT) -> list[Broken]:
    """Broken references of all ``files`` (relative to ``root``), one per offending line and kind."""
    found: list[Broken] = []
    for rel in files:
        found.extend(broken_in(rel, (root / rel).read_text(encoding="utf-8", errors="replace"), root))
    return found


def test_every_reference_points_at_a_file_in_the_repository() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = tracked_files()
    assert "docs/design.md" in files and "README.md" in files, "the scan must see the docs"
    broken = broken_references(files)
    for b in broken:
        print(b)
    assert not broken, "references to files the repository does not hold:\n" + "\n".join(map(str, broken))


def _write(root: Path, rel: str, text: str) -> str:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)
    return rel


def test_each_kind_of_broken_reference_is_caught(tmp_path: Path) -> None:
    _write(tmp_path, "docs/there.md", "")
    _write(tmp_path, "streamgen/there.py", "")
    page = _write(tmp_path, "docs/page.md", "\n".join([
        "[ok](there.md) [ok](there.md#a-section) [web](https://x.org/a.md) [mail](mailto:a@b) [anchor](#top)",
        "[gone](missing.md)",
        "see `streamgen/there.py::test` and streamgen/there.py:12, docs/there.md.",
        "see `streamgen/gone.py`",
        "paths with placeholders: configs/cluster/<site>.yaml, data/*/x.jsonl, configs/grid/{name}.yaml",
        "paths inside longer ones: /tmp/run/docs/gone.md, ~/jobs/gone.py, my_bench/gone.py",
        "directories without a file name: streamgen/ and jobs/",
        "the old notes: " + OUTSIDE_DOCS[0] + "2",
    ]))
    broken = broken_references([page], tmp_path)
    assert [b.line for b in broken] == [2, 4, 8], broken
    assert str(broken[1]) == "docs/page.md:4: see `streamgen/gone.py`"


def test_only_the_prose_of_python_is_read(tmp_path: Path) -> None:
    module = _write(tmp_path, "jobs/m.py", "\n".join([
        '"""Docstring naming `jobs/gone.py`."""',
        'PATH = "jobs/also_gone.py"  # a comment naming docs/gone.md',
        "def f():",
        '    """Docstring of f: configs/grid/NAME.yaml is a placeholder."""',
        '    return f"configs/{x}.yaml", "data/in.txt"',
    ]))
    assert [b.line for b in broken_references([module], tmp_path)] == [1, 2]


def test_upstream_provenance_files_are_not_scanned(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    _write(tmp_path, "data/x/SOURCE.md", "upstream path `data/x.jsonl.gz`")
    _write(tmp_path, "docs/a.md", "")
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    assert tracked_files(tmp_path) == ["docs/a.md"]


def test_a_link_resolves_relative_to_its_page(tmp_path: Path) -> None:
    _write(tmp_path, "docs/sub/a.md", "")
    page = _write(tmp_path, "docs/page.md", "[a](sub/a.md)\n[b](../docs/sub/a.md)\n[c](a.md)\n")
    assert [b.line for b in broken_references([page], tmp_path)] == [3]
