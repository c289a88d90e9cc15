"""Dependencies point one way (docs/design.md, 'Layers'): workflows → jobs → streamgen; analysis → streamgen.results.records.

Checked by parsing every module's imports (also the ones inside functions), without importing them.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streamgen", "jobs", "workflows", "analysis")
# package → top-level names (ours and third-party) it must never import
FORBIDDEN = {
    "streamgen": ("ray", "jobs", "workflows", "analysis", "submitit"),
    "jobs": ("workflows", "analysis"),
    "analysis": ("jobs", "workflows", "ray"),
    "workflows": (),
}
# analysis reads the records (the files a reader may trust: streamgen.results.result_files), spells a cell's label the one way (streamgen.results.cells: config + records only),
# shares the pure timing model (no torch) with the live stream run, and spells a rule by its registry
ANALYSIS_MAY_USE = ("streamgen.results", "streamgen.config", "streamgen.timing", "streamgen.acceptance_rules")
# analysis.rescore scores stored answers again: it needs the benchmarks' scorers (and the code version it
# stamps), still no model, torch or Ray
RESCORE_MAY_USE = ("streamgen.benchmarks", "streamgen.results.version")


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against its package)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return _imports_of(tree, module_name(path, root), path.name == "__init__.py")


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_one_way(package: str) -> None:
    bad = []
    for path in modules(package):
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
            allowed = ANALYSIS_MAY_USE + (RESCORE_MAY_USE if path.name == "rescore.py" else ())
            if package == "analysis" and top == "streamgen" and not (
                    name == "streamgen" or name.startswith(allowed)):
                bad.append(f"{path.relative_to(ROOT)} imports {name} (analysis may use {ANALYSIS_MAY_USE} only)")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_imports_inside_functions(tmp_path: Path) -> None:
    probe = tmp_path / "jobs" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("def f():\n    import workflows.full_grid\n    from ..analysis import tables\n")
    names = imported_modules(probe, root=tmp_path)
    assert "workflows.full_grid" in names and "analysis.tables" in names


def test_every_package_has_modules() -> None:
    for package in ("streamgen", "jobs", "workflows"):
        assert modules(package), package


# --------------------------------------------------------------------------------------------
# No import cycle among streamgen/ modules, including imports inside functions and through the
# family registry (streamgen.families.registry imports every decoder module by name, so a decoder importing it back
# closes a cycle). Imports under ``if TYPE_CHECKING:`` never run and are left out.
# --------------------------------------------------------------------------------------------

DECODER_MODULES = ("streamgen.families.autoregressive.decoder", "streamgen.families.refusion.decoder",
                   "streamgen.families.bidirectional.decoder", "streamgen.families.diffusion_gemma.decoder")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path, root: Path = ROOT) -> set[str]:
    """Like :func:`imported_modules`, without the ``if TYPE_CHECKING:`` blocks (they never run)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = [ast.Pass()]
    return _imports_of(tree, module_name(path, root), path.name == "__init__.py")


def _imports_of(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Absolute names imported anywhere in ``tree`` (also inside functions), for ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path = ROOT, package: str = "streamgen") -> dict[str, set[str]]:
    """module → the modules of ``package`` it imports (``from a import b`` counts b when b is a module)."""
    files = {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    return {m: {n for n in runtime_imports(p, root) if n in files and n != m} for m, p in files.items()}


def find_cycle(graph: Mapping[str, Collection[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None when the graph is acyclic (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


@functools.cache
def streamgen_graph() -> dict[str, frozenset[str]]:
    """The real streamgen/ graph, parsed once per session (tests copy it before changing it)."""
    return {m: frozenset(deps) for m, deps in import_graph().items()}


def test_no_import_cycle_among_streamgen_modules() -> None:
    graph = {m: set(deps) for m, deps in streamgen_graph().items()}
    faces = {m.rpartition(".")[0] for m in DECODER_MODULES}
    assert faces <= graph["streamgen.families.registry"], "the registry imports every family's face explicitly"
    assert all({f"{face}.decoder", f"{face}.plugin"} & graph[face] for face in faces), \
        "each face imports the module holding its FAMILY plug-in (inside a function: when asked)"
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_import_cycle_among_jobs_modules() -> None:
    """The driver side too: the scheduler yields events instead of calling the driver back, and the
    row builder (jobs.run.rows) names the actor's task types for annotations only."""
    graph = import_graph(package="jobs")
    assert "jobs.run.rows" in graph["jobs.run.driver"] and "jobs.run.scheduler" in graph["jobs.run.driver"]
    assert not graph["jobs.run.scheduler"] & set(graph), "the scheduler imports nothing of jobs/"
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_decoder_module_imports_the_registry() -> None:
    graph = streamgen_graph()
    bad = [m for m in graph if m.startswith(("streamgen.decoding.", "streamgen.families.")) and m.count(".") > 2
           and "streamgen.families.registry" in graph[m]]
    assert not bad, f"{bad} import streamgen.families.registry; import the leaf streamgen.models.weights instead"


def test_the_cycle_check_catches_the_old_lazy_registry_import() -> None:
    """Before issue 12, bidirectional.py did ``from streamgen import models`` inside its loader while
    models.py reached the decoders (the registry is streamgen.families.registry since issue 53): put that import back and the graph has a cycle through the registry."""
    graph = {m: set(deps) for m, deps in streamgen_graph().items()}
    old = ast.parse("def load_model_and_tokenizer(cfg, device):\n    from streamgen.families import registry\n")
    graph["streamgen.families.bidirectional.decoder"] |= _imports_of(old, "streamgen.families.bidirectional.decoder", False) & set(graph)
    cycle = find_cycle(graph)
    assert cycle is not None and "streamgen.families.registry" in cycle and "streamgen.families.bidirectional.decoder" in cycle


def test_type_checking_imports_are_not_edges(tmp_path: Path) -> None:
    probe = tmp_path / "streamgen" / "a.py"
    probe.parent.mkdir()
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from streamgen import b\n"
                     "def f():\n    from streamgen import c\n")
    (tmp_path / "streamgen" / "b.py").write_text("from streamgen import a\n")
    (tmp_path / "streamgen" / "c.py").write_text("")
    graph = import_graph(tmp_path)
    assert graph["streamgen.a"] == {"streamgen.c"} and graph["streamgen.b"] == {"streamgen.a"}
    assert find_cycle(graph) is None
    (tmp_path / "streamgen" / "c.py").write_text("import streamgen.a\n")
    assert find_cycle(import_graph(tmp_path)) == ["streamgen.a", "streamgen.c", "streamgen.a"]


# --------------------------------------------------------------------------------------------
# No import circle at all among our modules, counting every import a reader has to follow: those
# inside functions and those under ``if TYPE_CHECKING:`` too (a type-only circle still means two
# modules that each need the other to be read). Shared types live in the module that owns them
# (jobs.grid.shard_tasks, streamgen.requests.request, analysis.simulate's inputs).
# --------------------------------------------------------------------------------------------


def reader_graph(root: Path = ROOT, packages: Collection[str] = PACKAGES) -> dict[str, set[str]]:
    """module → our modules it imports anywhere (top level, functions, ``TYPE_CHECKING`` blocks)."""
    files = {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    return {m: {n for n in imported_modules(p, root) if n in files and n != m} for m, p in files.items()}


def test_no_import_circle_even_type_only_or_inside_functions() -> None:
    graph = reader_graph()
    assert {"jobs.grid.shard_tasks", "streamgen.requests.request"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


@pytest.mark.parametrize("importer,imported", [
    ("jobs.grid.shard_tasks", "jobs.run.rows"),            # the old ShardTask.row_context
    ("streamgen.live", "streamgen.stream"),  # the old TYPE_CHECKING import of StreamRequest
    ("analysis.typing_table", "analysis.simulate"),  # the old function-level import of Script
])
def test_each_old_circle_would_be_caught(importer: str, imported: str) -> None:
    graph = reader_graph()
    graph[importer].add(imported)
    cycle = find_cycle(graph)
    assert cycle is not None and importer in cycle and imported in cycle, cycle


def test_the_reader_graph_counts_type_checking_imports(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jobs import b\n")
    (tmp_path / "jobs" / "b.py").write_text("def f():\n    import jobs.a\n")
    graph = reader_graph(tmp_path, ("jobs",))
    assert graph == {"jobs.a": {"jobs.b"}, "jobs.b": {"jobs.a"}}
    assert find_cycle(graph) == ["jobs.a", "jobs.b", "jobs.a"]


# --------------------------------------------------------------------------------------------
# streamgen/'s packages, one concept each, and which of the others each may import: the table of
# docs/design.md, 'Layers'. A root module (config, exclusions, stream, ...) counts by its own name;
# adapt/, demo/ and the root modules themselves sit on top and are not constrained here.
# --------------------------------------------------------------------------------------------

PACKAGE_MAY_USE: dict[str, frozenset[str]] = {
    # the ground floor: the family names come from streamgen/families/*/family.yaml, read as data
    "config": frozenset({"acceptance_rules"}),
    "requests": frozenset({"config"}),
    "timing": frozenset({"config", "requests"}),
    "results": frozenset({"config", "acceptance_rules"}),
    "scoring": frozenset(),
    "benchmarks": frozenset({"config", "requests", "exclusions", "scoring"}),
    "models": frozenset({"config"}),
    "decoding": frozenset({"config", "requests", "models", "acceptance_rules"}),
    "families": frozenset({"config", "requests", "models", "decoding", "acceptance_rules"}),
    "sizing": frozenset({"config", "models", "decoding", "families"}),
    "diagnostics": frozenset({"config", "requests", "results", "decoding", "benchmarks", "acceptance_rules"}),
}
# (source, target) → the only modules of source that may import target (none left: the model side, the
# shared decoding and the families sit on three floors since issue 53)
ONLY_IMPORTERS: dict[tuple[str, str], tuple[str, ...]] = {}


def concept(module: str) -> str:
    """``streamgen.timing.policies`` → ``timing``; ``streamgen.config`` → ``config``; ``streamgen`` → ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def package_violations(graph: Mapping[str, Collection[str]]) -> list[str]:
    bad = []
    for module, deps in graph.items():
        source = concept(module)
        if source not in PACKAGE_MAY_USE:
            continue
        for dep in deps:
            target = concept(dep)
            if target in ("", source):
                continue
            if target not in PACKAGE_MAY_USE[source]:
                bad.append(f"{module} imports {dep}: streamgen.{source} may use {sorted(PACKAGE_MAY_USE[source])}")
            elif module not in ONLY_IMPORTERS.get((source, target), (module,)):
                bad.append(f"{module} imports {dep}: of streamgen.{source} only "
                           f"{' and '.join(ONLY_IMPORTERS[(source, target)])} may")
            elif source == "families" and module.count(".") > 2 and dep == "streamgen.families.registry":
                bad.append(f"{module} imports the registry, which imports every decoder")
    return sorted(bad)


def test_each_package_imports_only_the_concepts_below_it() -> None:
    assert set(PACKAGE_MAY_USE) <= {concept(m) for m in streamgen_graph()}, "a package of the table is gone"
    bad = package_violations(streamgen_graph())
    assert not bad, "\n".join(bad)


def test_the_package_check_names_a_timing_module_that_reaches_a_model() -> None:
    graph = {m: set(deps) for m, deps in streamgen_graph().items()}
    graph["streamgen.timing.policies"].add("streamgen.models.weights")
    graph["streamgen.models.weights"].add("streamgen.decoding.base")
    assert package_violations(graph) == [
        "streamgen.models.weights imports streamgen.decoding.base: streamgen.models may use ['config']",
        "streamgen.timing.policies imports streamgen.models.weights: streamgen.timing may use ['config', 'requests']",
    ]


# --------------------------------------------------------------------------------------------
# workflows/ use analysis/ only through its face: the public entry points analysis/__init__.py names
# (issue 53). Read from the source, so the face is not imported here either.
# --------------------------------------------------------------------------------------------

def face_names(root: Path = ROOT) -> set[str]:
    """The names in analysis/__init__.py's ``__all__``."""
    tree = ast.parse((root / "analysis" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def reaches_past_the_face(path: Path, face: set[str]) -> list[str]:
    """Each import in ``path`` of analysis as a module (``import analysis[.x]``, ``from analysis.x import``), or of
    a name the face does not list."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            bad += [alias.name for alias in node.names if alias.name.split(".")[0] == "analysis"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "analysis":
            if node.module != "analysis" or node.level:
                bad.append(f"{node.module} ({', '.join(a.name for a in node.names)})")
            else:
                bad += [f"analysis.{a.name}" for a in node.names if a.name not in face]
    return bad


def test_workflows_use_analysis_only_through_its_face() -> None:
    face = face_names()
    assert {"print_summary", "budget_line", "adaptation_summary", "regression_check", "write_probe_report"} <= face
    bad = [f"{p.relative_to(ROOT)} imports {name}" for p in modules("workflows") for name in reaches_past_the_face(p, face)]
    assert not bad, "workflows/ may import from analysis only the face's names (analysis/__init__.py):\n" + "\n".join(bad)


def test_the_face_check_catches_a_module_import(tmp_path: Path) -> None:
    script = tmp_path / "w.py"
    script.write_text("import analysis\nfrom analysis import budget_line\ndef f():\n    from analysis.tables import x\n"
                      "    from analysis import regression\n    import analysis.report\n")
    assert sorted(reaches_past_the_face(script, {"budget_line"})) == [  # a bare `import analysis` reaches any module
        "analysis", "analysis.regression", "analysis.report", "analysis.tables (x)"]


def test_the_face_gives_each_name_from_the_module_it_names() -> None:
    import importlib

    import analysis

    assert sorted(analysis.ENTRY_POINTS) == sorted(analysis.__all__) == sorted(face_names())
    for name, module in analysis.ENTRY_POINTS.items():
        assert getattr(analysis, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(ImportError):
        exec("from analysis import not_an_entry_point", {})
