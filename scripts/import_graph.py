"""The project's import graph, read from the source with ``ast``: the house's shape in numbers.

    python scripts/import_graph.py              # every folder of streamgen/, jobs/, analysis/, workflows/
    python scripts/import_graph.py --json F     # the same numbers as JSON (to compare a before and an after)

Per folder (a package, or a plain folder of scripts):

- ``modules``: the ``.py`` files directly in it (``__init__`` included);
- ``floors``: the longest chain of imports among those modules (a module importing nothing of its own
  folder is on floor 1; one importing a floor-k module is on floor k + 1 or higher);
- ``in circles``: imports from this folder into a unit that imports it back, directly or through others
  (the edges inside a circle; 0 means the folder is layered against the rest). A unit is a subpackage
  (``streamgen/decoding``) or, for modules directly in a top-level folder (``streamgen/stream.py``,
  ``workflows/nightly.py``), the module itself: the module graph has no circle, so a circle of units is an import
  that runs back up between packages, such as ``models`` ↔ ``decoding``.

Every import counts, at module level or inside a function, except those under ``if TYPE_CHECKING:``
(they run only in the type checker). ``from pkg import name`` counts as an import of ``pkg.name`` when that
is a module, else of ``pkg``. Only the project's own modules are nodes.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

ROOTS = ("streamgen", "jobs", "analysis", "workflows")


@dataclass(frozen=True)
class Folder:
    """One folder's numbers (see the module docstring)."""

    folder: str
    modules: int
    floors: int
    in_circles: int


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, roots: Iterable[str] = ROOTS) -> dict[str, Path]:
    """Module name → file, for every ``.py`` under the named top-level folders."""
    found: dict[str, Path] = {}
    for top in roots:
        for path in sorted((root / top).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[module_name(path, root)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.If) and _is_type_checking(node):
            children = list(node.orelse)
        stack.extend(children)


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` (file ``path``) imports."""
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = _package_of(name, path).split(".")
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for target in targets:
            while target and target not in modules:  # `import a.b.c` where only a.b is ours, e.g.
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def folder_of(name: str, modules: dict[str, Path], root: Path) -> str:
    return modules[name].parent.relative_to(root).as_posix()


def graph(root: Path, roots: Iterable[str] = ROOTS) -> tuple[dict[str, set[str]], dict[str, str]]:
    """Module → the project modules it imports; module → its folder."""
    modules = project_modules(root, roots)
    edges = {name: imported(name, path, modules) for name, path in modules.items()}
    return edges, {name: folder_of(name, modules, root) for name in modules}


def floors(edges: dict[str, set[str]], folder: dict[str, str], which: str) -> int:
    """The longest import chain inside folder ``which`` (a circle, if any, is cut where it closes)."""
    members = {m for m, f in folder.items() if f == which}

    @cache
    def floor(m: str, seen: frozenset[str] = frozenset()) -> int:
        inner = [t for t in edges[m] if t in members and t not in seen]
        return 1 + max((floor(t, seen | {m}) for t in inner), default=0)

    return max((floor(m) for m in members), default=0)


def reach(folder_edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Unit → every unit it reaches through one or more imports."""
    out: dict[str, set[str]] = {}
    for start in folder_edges:
        seen: set[str] = set()
        todo = list(folder_edges[start])
        while todo:
            f = todo.pop()
            if f not in seen:
                seen.add(f)
                todo.extend(folder_edges.get(f, ()))
        out[start] = seen
    return out


def measure(root: Path, roots: Iterable[str] = ROOTS) -> list[Folder]:
    edges, folder = graph(root, roots)
    unit = {m: f if "/" in f else m for m, f in folder.items()}
    unit_edges: dict[str, set[str]] = defaultdict(set)
    for m, targets in edges.items():
        unit_edges[unit[m]] |= {unit[t] for t in targets if unit[t] != unit[m]}
    reaches = reach(dict(unit_edges))
    up: dict[str, int] = defaultdict(int)
    for m, targets in edges.items():
        for t in targets:
            a, b = unit[m], unit[t]
            if a != b and a in reaches.get(b, set()):  # b imports a back: the edge closes a circle
                up[folder[m]] += 1
    names = sorted(set(folder.values()))
    return [Folder(f, sum(1 for v in folder.values() if v == f), floors(edges, folder, f), up[f]) for f in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    rows = measure(args.root)
    print(f"{'folder':<28} {'modules':>7} {'floors':>6} {'in circles':>10}")
    for r in rows:
        print(f"{r.folder:<28} {r.modules:>7} {r.floors:>6} {r.in_circles:>10}")
    print(f"{'total':<28} {sum(r.modules for r in rows):>7} {'':>6} {sum(r.in_circles for r in rows):>10}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
