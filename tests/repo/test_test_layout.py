"""The tests mirror the packages (docs/testing.md, "Layout"), so a newcomer finds a module's tests by its path.

Checked: every module of streamgen/, jobs/, analysis/ and workflows/ has its test file by name
(``streamgen/decoding/meter.py`` → ``tests/streamgen/decoding/test_meter.py``) or a line in docs/testing.md's
table "Where a module's behaviour is tested", and each line of that table names a module that exists, has no
test file by name, and test files that exist; every folder of test files mirrors a folder of the repository
(or is tests/repo/) and is a package; no test file sits directly in tests/; test file names are unique under
tests/ (conftest's machine group and the xdist units go by file name). A package's ``__init__.py`` counts
as a module when it defines a function or class; its file by name is ``test_<package>.py``.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streamgen", "jobs", "analysis", "workflows")
OWN_FOLDERS = ("repo",)  # the repository as a whole: no source folder to mirror
TABLE = "## Where a module's behaviour is tested"
ROW = re.compile(r"^\| `([^`]+)` \| (.*) \|$")


def source_modules(root: Path) -> list[str]:
    """Every module of the four packages (relative paths): each ``.py``, a package face only with code."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts or (path.name == "__init__.py" and not _defines_something(path)):
                continue
            found.append(path.relative_to(root).as_posix())
    return found


def _defines_something(path: Path) -> bool:
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
               for node in ast.parse(path.read_text()).body)


def file_by_name(module: str) -> str:
    """``tests/<the module's folder>/test_<its name>.py``; a package face: ``test_<the package>.py``."""
    path = Path(module)
    name = path.parent.name if path.name == "__init__.py" else path.stem
    return (Path("tests") / path.parent / f"test_{name}.py").as_posix()


def table_rows(page: str) -> dict[str, list[str]]:
    """The table under TABLE: module → the test files its line names."""
    section = page.split(TABLE, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        match = ROW.match(line.strip())
        if match:
            rows[match.group(1)] = re.findall(r"`(tests/[^`]+\.py)`", match.group(2))
    return rows


def modules_without_a_home(root: Path, rows: dict[str, list[str]]) -> list[str]:
    """Modules with neither a test file by name nor a line in the table."""
    return [m for m in source_modules(root) if not (root / file_by_name(m)).is_file() and m not in rows]


def stale_rows(root: Path, rows: dict[str, list[str]]) -> list[str]:
    """One message per table line that no longer holds, naming the fix."""
    problems = []
    modules = set(source_modules(root))
    for module, tests in rows.items():
        if module not in modules:
            problems.append(f"{module}: no such module (renamed or removed? change or drop its line)")
        elif (root / file_by_name(module)).is_file():
            problems.append(f"{module}: has {file_by_name(module)} by name now (drop its line)")
        if not tests:
            problems.append(f"{module}: the line names no test file")
        problems.extend(f"{module}: {t} does not exist" for t in tests if not (root / t).is_file())
    return problems


def layout_problems(root: Path) -> list[str]:
    """Test files directly in tests/, folders that mirror nothing, folders that are not packages."""
    tests = root / "tests"
    problems = [f"{p.relative_to(root)}: move it into the folder of the package it tests"
                for p in sorted(tests.glob("test_*.py"))]
    folders = sorted({p.parent for p in tests.rglob("test_*.py") if "__pycache__" not in p.parts} - {tests})
    for folder in folders:
        mirrored = folder.relative_to(tests)
        if mirrored.parts[0] not in OWN_FOLDERS and not (root / mirrored).is_dir():
            problems.append(f"{folder.relative_to(root)}/: {mirrored.as_posix()}/ does not exist (package renamed?)")
        for package in [folder, *folder.relative_to(tests).parents]:
            init = (package if package.is_absolute() else tests / package) / "__init__.py"
            if not init.is_file():
                problems.append(f"{init.relative_to(root)} is missing (every test folder is a package)")
    return sorted(set(problems))


def repeated_names(root: Path) -> list[str]:
    names = Counter(p.name for p in (root / "tests").rglob("test_*.py") if "__pycache__" not in p.parts)
    return sorted(name for name, count in names.items() if count > 1)


def _rows() -> dict[str, list[str]]:
    return table_rows((ROOT / "docs" / "testing.md").read_text())


def test_every_module_has_its_test_file_by_name_or_a_line_in_the_table() -> None:
    missing = modules_without_a_home(ROOT, _rows())
    assert not missing, (f"modules without a test file by name ({file_by_name(missing[0])}, …) and without a "
                         f"line in docs/testing.md, '{TABLE[3:]}' (python3 scripts/tested_where.py drafts "
                         f"one): {missing}")


def test_every_line_of_the_table_still_holds() -> None:
    rows = _rows()
    assert len(rows) > 50, "the table was not found or not parsed"
    problems = stale_rows(ROOT, rows)
    assert not problems, "docs/testing.md, '" + TABLE[3:] + "':\n" + "\n".join(problems)


def test_test_folders_mirror_the_repository_and_are_packages() -> None:
    problems = layout_problems(ROOT)
    assert not problems, "\n".join(problems)


def test_test_file_names_are_unique() -> None:
    repeated = repeated_names(ROOT)
    assert not repeated, f"test file names used twice under tests/ (MACHINE_FILES and xdist units go by name): {repeated}"


def _write(root: Path, rel: str, text: str = "") -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_a_module_with_neither_and_each_stale_line_are_caught(tmp_path: Path) -> None:
    _write(tmp_path, "streamgen/a.py")
    _write(tmp_path, "streamgen/b.py")  # neither a test file by name nor a line
    _write(tmp_path, "streamgen/pkg/__init__.py", '"""A face with code."""\ndef f(): ...\n')
    _write(tmp_path, "jobs/__init__.py", '"""A face without code: not a module of its own."""\nimport os\n')
    _write(tmp_path, "tests/streamgen/test_a.py")
    page = f"{TABLE}\n\n| module | tested in |\n| --- | --- |\n| `streamgen/pkg/__init__.py` | `tests/streamgen/test_a.py` |\n"
    rows = table_rows(page)
    assert rows == {"streamgen/pkg/__init__.py": ["tests/streamgen/test_a.py"]}
    assert file_by_name("streamgen/pkg/__init__.py") == "tests/streamgen/pkg/test_pkg.py"
    assert modules_without_a_home(tmp_path, rows) == ["streamgen/b.py"]
    assert stale_rows(tmp_path, rows) == []

    stale = {"streamgen/gone.py": ["tests/streamgen/test_a.py"], "streamgen/a.py": ["tests/streamgen/test_gone.py"],
             "streamgen/b.py": []}
    assert stale_rows(tmp_path, stale) == [
        "streamgen/gone.py: no such module (renamed or removed? change or drop its line)",
        "streamgen/a.py: has tests/streamgen/test_a.py by name now (drop its line)",
        "streamgen/a.py: tests/streamgen/test_gone.py does not exist",
        "streamgen/b.py: the line names no test file"]


def test_a_misplaced_file_a_folder_that_mirrors_nothing_and_a_missing_package_are_caught(tmp_path: Path) -> None:
    _write(tmp_path, "streamgen/a.py")
    for rel in ("tests/__init__.py", "tests/streamgen/__init__.py", "tests/streamgen/test_a.py",
                "tests/repo/__init__.py", "tests/repo/test_readme.py"):
        _write(tmp_path, rel)
    assert layout_problems(tmp_path) == []
    _write(tmp_path, "tests/test_flat.py")
    _write(tmp_path, "tests/streamgen/old/__init__.py")
    _write(tmp_path, "tests/streamgen/old/test_x.py")
    _write(tmp_path, "tests/streamgen/sub/test_y.py")
    (tmp_path / "streamgen/sub").mkdir()
    assert layout_problems(tmp_path) == [
        "tests/streamgen/old/: streamgen/old/ does not exist (package renamed?)",
        "tests/streamgen/sub/__init__.py is missing (every test folder is a package)",
        "tests/test_flat.py: move it into the folder of the package it tests"]
    _write(tmp_path, "tests/repo/test_x.py")
    assert repeated_names(tmp_path) == ["test_x.py"]
