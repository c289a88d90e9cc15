"""Where each source module's behaviour is tested, from the imports of the test files: the rows of the table
in docs/testing.md ("Where a module's behaviour is tested") for the modules without a test file by name.

    python scripts/tested_where.py            # the table's rows, to paste (check each by reading the tests)
    python scripts/tested_where.py --all      # every module, by-name test files included

A module's test file by name mirrors its path: ``streamgen/decoding/meter.py`` →
``tests/streamgen/decoding/test_meter.py``; a package face with code (``streamgen/benchmarks/__init__.py``) →
``tests/streamgen/benchmarks/test_benchmarks.py``. For the others the script lists the test files that import
the module (``import m``, ``from m import x``, ``from pkg import m``) or name it (``python -m m``, a path such
as ``workflows/full_grid.py``): those in the module's own test folder first, then by most mentions, at
most three. The tests of the repository's structure (import direction, README) are left out. A module no
test names is printed as NONE: find its tests by hand. tests/repo/test_test_layout.py defines what a
module and its file by name are, and checks the table; this script only drafts it.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's tests: the rule is defined there
from tests.repo.test_test_layout import file_by_name, source_modules  # noqa: E402

SHOWN = 3
# tests of the repository's structure name modules without testing their behaviour (import direction, README)
STRUCTURE = ("tests/repo/test_import_direction.py", "tests/repo/test_readme_files.py",
             "tests/repo/test_file_references.py", "tests/repo/test_import_graph.py")


def dotted(module: str) -> str:
    parts = Path(module).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def mentions(test_file: Path, names: set[str]) -> Counter[str]:
    """How often ``test_file`` imports or names each dotted module of ``names``."""
    text = test_file.read_text()
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in names]
            found.update(subs or ([node.module] if node.module in names else []))
    for name in names:  # python -m name, "path/to/name.py", monkeypatch strings: each counts once
        path = name.replace(".", "/")
        if re.search(rf"[\"'\s]{re.escape(name)}[\"'.]|{re.escape(path)}(\.py|/__init__\.py)", text):
            found[name] += 1
    return found


def rows(root: Path, every: bool = False) -> list[str]:
    modules = source_modules(root)
    names = {dotted(m): m for m in modules}
    tests = sorted(p for p in (root / "tests").rglob("test_*.py")
                   if "__pycache__" not in p.parts and str(p.relative_to(root)) not in STRUCTURE)
    by_module: dict[str, Counter[str]] = {n: Counter() for n in names}
    for test in tests:
        for name, count in mentions(test, set(names)).items():
            by_module[name][str(test.relative_to(root))] += count
    out = []
    for name, module in names.items():
        own = Path(file_by_name(module))
        if (root / own).is_file() and not every:
            continue
        mirror = f"{own.parent}/"  # the module's own test folder first, then the most mentions
        ranked = sorted(by_module[name].items(), key=lambda kv: (not kv[0].startswith(mirror), -kv[1], kv[0]))
        where = [t for t, _ in ranked[:SHOWN]]
        cell = ", ".join(f"`{t}`" for t in where) if where else "NONE: write it by hand"
        out.append(f"| `{module}` | {cell} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every module, by-name test files included")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    print("\n".join(rows(args.root, args.all)))


if __name__ == "__main__":
    main()
