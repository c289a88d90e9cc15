"""jobs/cluster/executors.py: the one dispatch (local here, debug/slurm as a submitted job), no cluster needed.

The grid's and the adaptation's real jobs through it: tests/jobs/cluster/test_slurm_partition.py (debug),
tests/workflows/test_adapt_workflow.py (debug), tests/jobs/cluster/test_slurm_cluster.py (the real Slurm).
"""

from __future__ import annotations

import ast
import dataclasses
import operator
from functools import partial
from pathlib import Path

import pytest

from jobs.cluster import executors
from streamgen.config import cluster_config

ROOT = Path(__file__).resolve().parents[3]


def _refuse() -> int:
    raise AssertionError("this executor must not take this path")


def test_local_runs_here_and_submits_nothing(tmp_path: Path) -> None:
    local = dataclasses.replace(cluster_config("local"), log_dir=str(tmp_path / "logs"))
    assert executors.run(local, here=partial(operator.add, 2, 3), job=_refuse) == 5
    assert not (tmp_path / "logs").exists()


def test_debug_submits_the_job_and_returns_its_result(tmp_path: Path) -> None:
    debug = dataclasses.replace(cluster_config("debug"), log_dir=str(tmp_path / "logs"))
    submitted = []

    def job() -> object:
        submitted.append(executors.submit(debug, "t", partial(operator.mul, 6, 7)))
        return submitted[-1]

    assert executors.run(debug, here=_refuse, job=job) == 42
    assert len(submitted) == 1 and submitted[0].paths.folder.parent == tmp_path / "logs"


def _compares_executor(tree: ast.AST) -> bool:
    """Whether the module compares some ``.executor`` with a string or a collection of strings (a kind's name)."""
    def is_name(node: ast.AST) -> bool:
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(is_name(e) for e in node.elts)
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "executor" for s in sides) and any(map(is_name, sides)):
                return True
    return False


@pytest.mark.parametrize("package", ["jobs", "workflows", "bench", "streamgen"])
def test_no_module_branches_on_the_executor_name(package: str) -> None:
    """What differs between local, debug and Slurm is asked of the cluster kind (jobs/cluster/kinds.py), never
    of ``cluster.executor``'s string: adding a kind edits no branch."""
    deciders = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / package).rglob("*.py"))
                if _compares_executor(ast.parse(p.read_text()))]
    assert deciders == []


def test_the_branch_finder_sees_the_old_branches() -> None:
    assert _compares_executor(ast.parse('if cluster.executor == "local":\n    pass\n'))
    assert _compares_executor(ast.parse('x = cluster.executor in ("local", "debug")\n'))
    assert not _compares_executor(ast.parse("kind = KINDS.get(cluster.executor)\n"))
