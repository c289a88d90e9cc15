"""The cluster kind as one interface (jobs/cluster/kind_protocol.py, kinds.py, local.py, debug.py, slurm.py): one
list of the names, every kind has the Protocol's members, an unknown executor is one message naming the known
kinds and the fix, and the resource check and Ray's start ask the kind, not the executor's string."""

from __future__ import annotations

import dataclasses
import inspect
import os
from pathlib import Path

import pytest
import yaml

from jobs.cluster import executors
from jobs.cluster.kind_protocol import ClusterKind, TaskEnv
from jobs.cluster.kinds import KINDS, cluster_kind
from jobs.grid import allocation_fit
from jobs.grid.checkpoint_preflight import grid_models
from streamgen.config import ClusterConfig, ConfigError, configs_dir, grid_config

MEMBERS = ("problems", "shape", "offer", "job_parameters", "task_env", "prepare")


def test_one_list_of_kind_names() -> None:
    """The registry's names are the YAMLs' executors, and the config keeps no list of its own."""
    import streamgen.config as config

    yamls = {yaml.safe_load(p.read_text())["executor"] for p in sorted((configs_dir() / "cluster").glob("*.yaml"))}
    assert {"local", "debug", "slurm", "ray"} <= set(KINDS) and not hasattr(config, "EXECUTORS")
    assert yamls == set(KINDS), "every kind has a YAML in configs/cluster/ and every YAML names a kind"
    assert all(kind.name == name for name, kind in KINDS.items())


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_implements_the_protocol(name: str) -> None:
    kind = KINDS[name]
    assert isinstance(kind, ClusterKind)
    for member in MEMBERS:  # runtime_checkable checks presence only: the parameters must match too
        want = list(inspect.signature(getattr(ClusterKind, member)).parameters)[1:]
        assert list(inspect.signature(getattr(kind, member)).parameters) == want, (name, member)
    assert isinstance(kind.runs_here, bool) and kind.submitit in ("local", "debug", "slurm")
    assert [k.name for k in KINDS.values() if k.runs_here] == ["local", "ray"]  # the driver runs in this process


def test_a_class_without_a_member_is_not_a_kind() -> None:
    class NoTaskEnv:
        name, submitit, runs_here = "x", "local", False

        def problems(self, cluster): ...
        def shape(self, grid, cluster): ...
        def offer(self, cluster): ...
        def job_parameters(self, cluster, gpu_type_as): ...

    assert not isinstance(NoTaskEnv(), ClusterKind)


def test_an_unknown_executor_is_one_message_naming_the_kinds_and_the_fix() -> None:
    bad = ClusterConfig(name="mine", executor="ssh")
    (line,) = executors.validate_cluster(bad)
    assert f"executor='ssh' is not one of {tuple(KINDS)}" in line and "'debug'" in line
    assert "set executor to one of them (configs/cluster/mine.yaml" in line and "jobs.cluster.kinds.KINDS" in line
    with pytest.raises(ConfigError) as caught:
        cluster_kind(bad)
    assert caught.value.problems == [line]
    with pytest.raises(ConfigError, match="executor='ssh'"):
        executors.run(bad, here=lambda: 1, job=lambda: pytest.fail("nothing may be submitted"))


def test_the_resource_check_asks_the_shape_not_the_executor() -> None:
    """Memory and the job's time limit are checked where the kind's shape says they bind, whatever the name."""
    grid = grid_config("smoke", ["shard_size=1", "shard_timeout_s=100000"])
    debug = ClusterConfig(name="d", executor="debug", mem_gb=1, timeout_min=1)
    models = grid_models(grid)
    facts = allocation_fit.WorkFacts({m: 2**20 for m in grid.models},
                                     {(m, b): 1000.0 for m in grid.models for b in grid.benchmarks}, 10**6)
    shape = executors.allocation(grid, debug)
    assert (shape.time_limit, shape.books_memory) == (None, False)
    assert allocation_fit.check(grid, debug, models, shape, facts).problems == ()
    bound = dataclasses.replace(shape, time_limit="toy limit", books_memory=True)
    problems = allocation_fit.check(grid, debug, models, bound, facts).problems
    assert any("mem_gb=1" in p for p in problems)
    assert any("the toy limit (60 s)" in p for p in problems)
    assert any("the whole run" in p for p in problems)
    slurm = dataclasses.replace(debug, executor="slurm")
    assert executors.allocation(grid, slurm).time_limit == "Slurm time limit"
    assert allocation_fit.check(grid, slurm, models, shape, facts).problems == ()  # the shape decides


def test_only_the_slurm_kind_reads_slurms_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"SLURM_CPUS_PER_TASK": "6", "SLURM_GPUS_ON_NODE": "2", "SLURMD_NODENAME": "n7",
                       "SLURM_RESTART_COUNT": "3", "CUDA_VISIBLE_DEVICES": "0"}.items():
        monkeypatch.setenv(key, value)
    assert KINDS["slurm"].task_env(1) == TaskEnv(6, 2, "n7", "3")
    assert KINDS["debug"].task_env(1) == TaskEnv(1, 1, None, "0")
    monkeypatch.delenv("SLURM_GPUS_ON_NODE")
    assert KINDS["slurm"].task_env(1).gpus == 1  # no GRES count: the visible devices
    root = Path(__file__).resolve().parents[3] / "jobs"
    readers = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if '"SLURM' in p.read_text())
    assert readers == ["cluster/slurm.py"]


def test_local_ray_puts_this_checkout_first_on_the_workers_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray workers unpickle actors from PYTHONPATH's first entry: it must be the checkout (a module moved one
    folder deeper once put jobs/ there, and a workflow started elsewhere lost streamgen in its workers)."""
    from jobs.run import local_ray

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    local_ray.put_checkout_on_worker_path()
    first = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0])
    assert (first / "streamgen" / "__init__.py").is_file() and (first / "jobs" / "run" / "local_ray.py").is_file()
