"""Every module is described in one line, and every path a description names exists (issue 40; issue 53 moved
the module index out of the README), so a reader who follows the index finds each file and misses none.

Two places describe modules:

- a package's face: the ``Modules:`` (and ``Packages:``) block of its ``__init__.py`` docstring, one
  ``name.py   description`` line per module (indented four spaces; or a bullet ``- ``name``: description``
  naming the module's stem), the path relative to the package (``streamgen/__init__.py`` for
  streamgen's root modules, ``streamgen/timing/__init__.py`` for ``timing/policies.py``);
- docs/design.md, "Module index": one fenced block of ``path   description`` lines from the repository root;
  an entry indented by two spaces lives in the last top-level folder above it (``jobs/`` then ``  plan.py``).

Checked: each entry's path exists (a glob must match something); each ``*.py`` under streamgen/, jobs/,
workflows/ and analysis/ except ``__init__.py`` is described in one of the two places. The lists of
configs/ and pyproject's extras the index spells out equal the folders and the extras. Also: the README's
first screen quotes what the default grid prints, and its fast-tier command is the one docs/testing.md gives.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("streamgen", "jobs", "workflows", "analysis")
ENTRY = re.compile(r"^( {0,2})(\S+)(?:\s|$)")
FACE_ENTRY = re.compile(r"^ {4}(\S+(?:\.py|/))\s{2,}\S")  # "    name.py   description" in a face's docstring
FACE_BULLET = re.compile(r"^- ``([\w.]+/?)``: *\S")  # or "- ``name``: description" (a module's stem, or name/)


def index_block(design: str) -> list[str]:
    """The lines of the fenced block under docs/design.md's ``## Module index``."""
    section = design.split("## Module index", 1)[1]
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


def face_paths(init: Path) -> list[str]:
    """Repository-relative paths a package's face describes (its docstring's indented entry lines)."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    package = init.parent.relative_to(ROOT).as_posix()
    paths = []
    for line in doc.splitlines():
        if m := FACE_ENTRY.match(line):
            paths.append(f"{package}/{m.group(1)}")
        elif m := FACE_BULLET.match(line):
            name = m.group(1)
            paths.append(f"{package}/{name}" if name.endswith(("/", ".py")) else f"{package}/{name}.py")
    return paths


def described() -> dict[str, str]:
    """Every described path → where it is described."""
    where = {p: "docs/design.md" for p in listed_paths(index_block((ROOT / "docs" / "design.md").read_text()))}
    for package in CHECKED:
        for init in sorted((ROOT / package).rglob("__init__.py")):
            where.update({p: str(init.relative_to(ROOT)) for p in face_paths(init)})
    return where


def python_modules() -> list[str]:
    return [str(p.relative_to(ROOT)) for package in CHECKED for p in sorted((ROOT / package).rglob("*.py"))
            if p.name != "__init__.py" and "__pycache__" not in p.parts]


def test_the_parsers_read_nested_entries_and_face_lines(tmp_path: Path) -> None:
    lines = ["pkg/        the package", "  a.py       one", "             more words", "  sub/b.py   two",
             "top.toml    a file"]
    assert listed_paths(lines) == ["pkg/", "pkg/a.py", "pkg/sub/b.py", "top.toml"]
    face = ROOT / "analysis" / "__init__.py"
    assert "analysis/report.py" in face_paths(face) and "analysis/sql/" in face_paths(face)
    assert "analysis/budget_line(results_dir," not in " ".join(face_paths(face))  # prose lines are not entries


def test_every_described_path_exists() -> None:
    missing = [f"{p} ({where})" for p, where in described().items() if not any(ROOT.glob(p.rstrip("/")))]
    assert not missing, f"module descriptions name paths the tree does not hold: {missing}"


def test_every_module_is_described() -> None:
    known = described()
    globbed = {str(p.relative_to(ROOT)) for pattern in known if "*" in pattern for p in ROOT.glob(pattern)}
    undescribed = [m for m in python_modules() if m not in known and m not in globbed]
    assert not undescribed, ("modules without a one-line description (add a line to their package's face, "
                             f"the __init__.py docstring's Modules: block, or docs/design.md's Module index): {undescribed}")


def test_a_module_without_a_description_is_caught(tmp_path: Path, monkeypatch) -> None:
    """The check fails for a module no face and no index line names (a new file dropped into a package)."""
    import tests.repo.test_readme_files as me

    fake = tmp_path / "analysis"
    fake.mkdir()
    (fake / "__init__.py").write_text('"""Face.\n\nModules:\n\n    described.py  one line\n\n'
                                      '- ``bullet``: a module by its stem\n- ``prose`` without a colon\n"""\n')
    for name in ("described", "bullet", "prose", "forgotten"):
        (fake / f"{name}.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "design.md").write_text("## Module index\n\n```\nREADME.md   the readme\n```\n")
    monkeypatch.setattr(me, "ROOT", tmp_path)
    monkeypatch.setattr(me, "CHECKED", ("analysis",))
    assert me.python_modules() == ["analysis/bullet.py", "analysis/described.py", "analysis/forgotten.py",
                                   "analysis/prose.py"]
    assert set(me.described()) == {"README.md", "analysis/described.py", "analysis/bullet.py"}
    with pytest.raises(AssertionError, match=r"\['analysis/forgotten.py', 'analysis/prose.py'\]"):
        me.test_every_module_is_described()


def _index_line(start: str) -> str:
    return next(line for line in index_block((ROOT / "docs" / "design.md").read_text()) if line.startswith(start))


def test_the_index_lists_every_config_of_each_folder() -> None:
    for folder in ("grid", "adapt", "cluster"):
        listed = _index_line(f"  {folder}/").split(":", 1)[1]
        names = sorted(p.stem for p in (ROOT / "configs" / folder).glob("*.yaml"))
        assert [n.strip() for n in listed.split(",")] == names, f"docs/design.md, Module index, configs/{folder}/"


def test_the_index_lists_every_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    listed = _index_line("pyproject.toml").split("extras (", 1)[1].split(")", 1)[0]
    assert sorted(e.strip() for e in listed.split(",")) == sorted(extras)


def test_the_readme_fast_tier_is_the_one_docs_testing_gives() -> None:
    readme = (ROOT / "README.md").read_text()
    testing = (ROOT / "docs" / "testing.md").read_text()
    marker = re.search(r'-m "not integration[^"]*"', readme)
    assert marker and marker.group(0) in testing
    assert "python -m pytest -n 2" in readme and "bash .ci/run" in readme


def _printed_sample() -> list[str]:
    """The lines README's first screen shows of what the default grid prints."""
    after = (ROOT / "README.md").read_text().split("and ends with", 1)[1]
    return after.split("```", 2)[1].strip("\n").split("\n")


def test_the_first_screens_sample_is_worded_as_the_run_prints() -> None:
    """Every word of the sample's summary lines (the table rows aside) is in the code that prints them, so a
    reworded summary line cannot leave a stale sample on the README's first screen."""
    printers = "".join((ROOT / path).read_text() for path in (
        "workflows/full_grid.py", "analysis/answer_budget.py",  # the run's lines and the budget line
        "analysis/report.py", "analysis/report_sections.py"))  # main_tables: the summary
    sample = _printed_sample()
    assert 8 <= len(sample) <= 12, "about ten lines"
    summary = [line for line in sample if not line.startswith("|")]
    assert len(summary) >= 4
    for line in summary:
        stale = [w for w in re.findall(r"[A-Za-z][A-Za-z ]{3,}[A-Za-z]", line.split(":", 1)[-1] if line.startswith("run ") else line)
                 if w not in printers]
        assert not stale, f"README sample line {line!r}: {stale} not printed by the run"
