"""README's Files section matches the tree (issue 40): every module it names exists, and every module of the
four packages is named there, so a reader who follows the list finds each file and misses none.

The section is one fenced block of ``path   description`` lines; an entry indented by two spaces lives in the
last top-level folder above it (``streamgen/`` then ``  timing/policies.py``). Checked: each entry's path
exists (a glob must match something); each ``*.py`` under streamgen/, jobs/, workflows/ and analysis/ is
an entry of its own, except ``__init__.py``, whose package's folder entry or modules stand for it. A folder entry
(``demo/static/``) covers the files in it that are not Python modules. bench/ and tests/ are described in
prose there and are not checked file by file.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("streamgen", "jobs", "workflows", "analysis")
ENTRY = re.compile(r"^( {0,2})(\S+)(?:\s|$)")


def files_block(readme: str) -> list[str]:
    """The lines of the fenced block under ``### Files``."""
    section = readme.split("### Files", 1)[1]
    return section.split("```", 2)[1].strip("\n").split("\n")


def listed_paths(lines: list[str]) -> list[str]:
    """Repository-relative paths of the block's entries (continuation lines, indented further, are skipped)."""
    paths: list[str] = []
    folder = ""
    for line in lines:
        match = ENTRY.match(line)
        if not match or line.startswith("   "):
            continue
        indent, name = match.groups()
        if indent:
            paths.append(folder + name)
        else:
            paths.append(name)
            folder = name if name.endswith("/") else ""
    return paths


def test_the_parser_reads_nested_entries() -> None:
    lines = ["pkg/        the package", "  a.py       one", "             more words", "  sub/b.py   two",
             "top.toml    a file"]
    assert listed_paths(lines) == ["pkg/", "pkg/a.py", "pkg/sub/b.py", "top.toml"]


def test_every_listed_path_exists() -> None:
    listed = listed_paths(files_block((ROOT / "README.md").read_text()))
    missing = [p for p in listed if not any(ROOT.glob(p.rstrip("/")))]
    assert not missing, f"README's Files section names paths the tree does not hold: {missing}"


def test_every_module_is_listed() -> None:
    listed = set(listed_paths(files_block((ROOT / "README.md").read_text())))
    modules = [str(p.relative_to(ROOT)) for package in CHECKED for p in sorted((ROOT / package).rglob("*.py"))
               if p.name != "__init__.py" and "__pycache__" not in p.parts]
    globbed = {str(p.relative_to(ROOT)) for pattern in listed if "*" in pattern for p in ROOT.glob(pattern)}
    unlisted = [m for m in modules if m not in listed and m not in globbed]
    assert not unlisted, f"modules missing from README's Files section (add a line each): {unlisted}"


def _printed_sample() -> list[str]:
    """The lines README's first screen shows of what the default grid prints."""
    after = (ROOT / "README.md").read_text().split("and ends with", 1)[1]
    return after.split("```", 2)[1].strip("\n").split("\n")


def test_the_first_screens_sample_is_worded_as_the_run_prints() -> None:
    """Every word of the sample's summary lines (the table rows aside) is in the code that prints them, so a
    reworded summary line cannot leave a stale sample on the README's first screen."""
    printers = "".join((ROOT / path).read_text() for path in (
        "workflows/full_grid.py", "analysis/report.py", "analysis/report_sections.py"))  # main_tables: the summary
    sample = _printed_sample()
    assert 8 <= len(sample) <= 12, "about ten lines"
    summary = [line for line in sample if not line.startswith("|")]
    assert len(summary) >= 4
    for line in summary:
        stale = [w for w in re.findall(r"[A-Za-z][A-Za-z ]{3,}[A-Za-z]", line.split(":", 1)[-1] if line.startswith("run ") else line)
                 if w not in printers]
        assert not stale, f"README sample line {line!r}: {stale} not printed by the run"
