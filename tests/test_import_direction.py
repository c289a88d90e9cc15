"""Dependencies point one way (DESIGN §3): workflows → jobs → streamgen; analysis → streamgen.records.

Checked by parsing every module's imports (also the ones inside functions), without importing them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("streamgen", "jobs", "workflows", "analysis")
# package → top-level names (ours and third-party) it must never import
FORBIDDEN = {
    "streamgen": ("ray", "jobs", "workflows", "analysis", "submitit"),
    "jobs": ("workflows", "analysis"),
    "analysis": ("jobs", "workflows", "ray"),
    "workflows": (),
}
# analysis reads the records, and shares the pure timing model (no torch) with the live stream run
ANALYSIS_MAY_USE = ("streamgen.records", "streamgen.config", "streamgen.timeline", "streamgen.policies",
                    "streamgen.costmodel")


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against its package)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
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
            if package == "analysis" and top == "streamgen" and not (
                    name == "streamgen" or name.startswith(ANALYSIS_MAY_USE)):
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
