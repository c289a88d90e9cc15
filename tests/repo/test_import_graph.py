"""scripts/import_graph.py on a designed tree whose numbers are counted by hand in the test."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import import_graph  # noqa: E402


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


TREE = {
    # pkg: a chain c -> b -> a (3 floors), plus `config` imported by the subpackage sub
    "pkg/__init__.py": "",
    "pkg/a.py": "import os\n",
    "pkg/b.py": "from pkg import a\n",
    "pkg/c.py": "from . import b\nfrom pkg.sub import x\n",
    "pkg/config.py": "",
    # pkg/sub <-> pkg/other: x imports other.y (module level), other.z imports sub.w inside a function
    "pkg/sub/__init__.py": "",
    "pkg/sub/x.py": "from ..config import *\nfrom pkg.other.y import thing\n",
    "pkg/sub/w.py": "",
    "pkg/other/__init__.py": "",
    "pkg/other/y.py": "",
    "pkg/other/z.py": "def f():\n    from pkg.sub import w\n",
    # a type-only import does not count: it would close a second circle sub -> tools -> sub
    "pkg/tools/__init__.py": "",
    "pkg/tools/t.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import x\nimport pkg.sub.w\n",
    "pkg/sub/v.py": "import pkg.tools.t\n",
    # plain folder of scripts
    "bin/run.py": "import pkg.c\nimport numpy\n",
}


def test_numbers_of_a_designed_tree(tmp_path: Path) -> None:
    write(tmp_path, TREE)
    rows = {r.folder: r for r in import_graph.measure(tmp_path, roots=("pkg", "bin"))}
    assert set(rows) == {"pkg", "pkg/sub", "pkg/other", "pkg/tools", "bin"}
    # modules: pkg has __init__, a, b, c, config; sub has __init__, x, w, v
    assert (rows["pkg"].modules, rows["pkg/sub"].modules, rows["pkg/other"].modules) == (5, 4, 3)
    # floors: c -> b -> a inside pkg; x, w, v import nothing of sub; y, z nothing of other
    assert (rows["pkg"].floors, rows["pkg/sub"].floors, rows["pkg/other"].floors, rows["bin"].floors) == (3, 1, 1, 1)
    # circles: sub.x -> other.y and other.z -> sub.w (a function-level import counts): one edge each way;
    # sub.v -> tools.t -> sub.w is a circle too (t's module-level import); the TYPE_CHECKING import is not an edge
    assert rows["pkg/sub"].in_circles == 2  # x -> other, v -> tools
    assert rows["pkg/other"].in_circles == 1 and rows["pkg/tools"].in_circles == 1
    # the top-level modules are units of their own: c -> sub -> config is no circle
    assert rows["pkg"].in_circles == 0 and rows["bin"].in_circles == 0


def test_relative_and_dotted_imports_resolve_to_project_modules(tmp_path: Path) -> None:
    write(tmp_path, TREE)
    edges, _ = import_graph.graph(tmp_path, roots=("pkg", "bin"))
    assert edges["pkg.c"] == {"pkg.b", "pkg.sub.x"}
    assert edges["pkg.sub.x"] == {"pkg.config", "pkg.other.y"}  # `from ..config import *`
    assert edges["pkg.tools.t"] == {"pkg.sub.w"}  # not pkg.sub.x: under TYPE_CHECKING
    assert edges["bin.run"] == {"pkg.c"}  # numpy is not ours


def test_the_command_prints_every_folder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "graph.json"
    assert import_graph.main(["--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "jobs" in text and "streamgen/decoding" in text and out.read_text().startswith("[")
