"""The study's shape on the two-node test cluster of .ci/slurm.sh: the grid through the shipped GPU file
(configs/cluster/slurm_a100.yaml) scaled to the test cluster by overrides, tiny models standing in for
the study's, ``rehearsal=true`` because the cluster's GPUs are fake (actors run their model on CPU, say
so and record it; docs/cluster.md).

It shows: one model actor per declared GPU, each holding a distinct GPU (node, Ray GPU id, its
CUDA_VISIBLE_DEVICES), from the runs row's actor inventory; the resource checks passing on the
allocation and refusing an undersized variant with one message before anything is queued; and a unit
killed mid-way by the time limit resuming, after Slurm requeues the job, from its finished examples.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jobs.cluster import executors
from jobs.grid import allocation_fit
from jobs.grid.checkpoint_preflight import grid_models
from jobs.grid.plan import plan_grid
from jobs.run.actors import GPU_ACTOR_CPUS
from streamgen.config import ConfigError, cluster_config, grid_config
from tests.jobs.cluster.test_slurm_cluster import _final_states, _job_ids, _runs, _sinfo_nodes, _wait
from tests.jobs.cluster.test_slurm_cluster import (
    pytestmark as pytestmark,  # the same marks and skip: no Slurm controller
)
from tests.support.analysis_fixtures import read_pairs

NODES, GPUS = 2, 2  # the test cluster: nodeA, nodeB with 2 fake GPUs each (.ci/slurm.sh)
STANDINS = ["tiny-llama", "tiny-qwen3", "tiny-llada", "tiny-dream"]  # two autoregressive, two bidirectional
WORKERS, SCORERS, STORE_MB = NODES * GPUS, 1, 128
UNIT = 4  # examples in the unit killed mid-way


def _grid(results: Path, *more: str) -> Any:
    """grid=full with the study's models swapped for tiny stand-ins: one model per GPU, so each actor
    holds its GPU for the whole run (no actor retires and hands its GPU on)."""
    return grid_config("full", [f"models=[{','.join(STANDINS)}]", "benchmarks=[coedit]", "limit=2", "shard_size=2",
                                "max_new_tokens=16", "taus=[0.5]", "verifier_modes=[visible]", f"workers={WORKERS}",
                                f"score_workers={SCORERS}", f"ray.object_store_mb={STORE_MB}", "shard_timeout_s=300",
                                f"results_dir={results}", *more])


def _need() -> tuple[int, int]:
    """(cpus_per_task, mem_gb) at the rules' boundaries for this grid (jobs/grid/allocation_fit.py)."""
    actors = min(WORKERS, GPUS)  # per node
    cpus = actors * GPU_ACTOR_CPUS + SCORERS
    mem = (STORE_MB / 1024 + actors * allocation_fit.SMALL_MODEL_BYTES / allocation_fit.GIB + allocation_fit.HEADROOM_BASE_GIB
           + allocation_fit.HEADROOM_PER_ACTOR_GIB * actors)
    return cpus, math.ceil(mem)


def _cluster(tmp_path: Path, *more: str) -> Any:
    cpus, mem = _need()
    return cluster_config("slurm_a100", ["partition=debug", "gpu_type=null", f"nodes={NODES}", f"gpus_per_node={GPUS}",
                                         f"cpus_per_task={cpus}", f"mem_gb={mem}", "timeout_min=30", "rehearsal=true",
                                         f"log_dir={tmp_path / 'logs'}", *more])


def test_undersized_variants_are_refused_in_one_message_before_anything_is_queued(tmp_path: Path) -> None:
    cpus, mem = _need()
    grid = _grid(tmp_path / "r", f"workers={WORKERS + 1}")
    before = _job_ids()
    with pytest.raises(ConfigError) as err:
        executors.submit_grid(grid, _cluster(tmp_path, f"mem_gb={mem - 1}", f"cpus_per_task={cpus - 1}"))
    problems = err.value.problems
    assert "nothing was submitted" in str(err.value)
    assert any(f"workers={WORKERS + 1} but cluster 'slurm_a100' has {NODES} node(s) × {GPUS}" in p for p in problems)
    assert any(f"mem_gb={mem - 1} but a node needs" in p and f"set mem_gb={mem}" in p for p in problems)
    assert any(f"set cpus_per_task={cpus} or more" in p for p in problems)
    assert _job_ids() == before and not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("rehearsal")
    grid, cluster = _grid(tmp / "r"), _cluster(tmp)
    fit = allocation_fit.check(grid, cluster, grid_models(grid), executors.allocation(grid, cluster))
    job = executors.submit_grid(grid, cluster)  # its checks pass: it is queued
    summary = executors.follow(job, poll_s=1.0)
    log = job.paths.stderr.read_text() + job.paths.stdout.read_text()
    return {"fit": fit, "summary": summary, "results": tmp / "r", "log": log}


def test_the_checks_pass_and_the_grid_runs(rehearsal: dict[str, Any]) -> None:
    assert rehearsal["fit"].problems == ()
    s = rehearsal["summary"]
    assert s.shards_done == s.shards_total == len(STANDINS) * 2 and not s.shards_failed and s.errors == 0


def test_one_actor_per_declared_gpu_each_on_its_own(rehearsal: dict[str, Any]) -> None:
    (run,) = _runs(rehearsal["results"])
    inventory = json.loads(run["device_inventory"])
    nodes = _sinfo_nodes()
    for node in inventory["nodes"]:  # each Ray node: its task's fake GPUs and the CPUs asked for
        assert node["resources"]["GPU"] == GPUS and node["resources"]["CPU"] == _need()[0]
    placements = inventory["actor_placements"]
    assert len(placements) == NODES * GPUS  # as many model actors as declared GPUs
    held = set()
    for actor, p in placements.items():
        (gpu,) = p["gpu_ids"]  # one GPU each ...
        assert p["cuda_visible_devices"] == gpu  # ... the only one its process sees
        assert p["cpu_fallback"] is True and inventory["actors"][actor] == "cpu"  # the rehearsal, recorded
        held.add((actor.split(":")[0], gpu))
    assert held == {(n, str(g)) for n in nodes for g in range(GPUS)}  # distinct: every (node, GPU) once
    models_by_actor: dict[str, set[str]] = {}
    for row in read_pairs(rehearsal["results"]):
        models_by_actor.setdefault(row["actor_id"], set()).add(row["model"])
    assert set(models_by_actor) == set(placements) and all(len(m) == 1 for m in models_by_actor.values())
    assert set().union(*models_by_actor.values()) == set(STANDINS)


def test_the_cpu_fallback_is_said_not_silent(rehearsal: dict[str, Any]) -> None:
    assert rehearsal["log"].count("rehearsal: holding GPU") >= 1, rehearsal["log"][-3000:]


def test_a_unit_killed_at_its_time_limit_resumes_from_its_finished_examples(tmp_path: Path) -> None:
    """The study's shape, third part: a unit killed mid-way by the time limit is requeued and decodes
    only the examples it had not finished.

    At the time limit Slurm sends the job SIGUSR2 (submitit asks for ``--signal=USR2@<delay>``) and
    submitit requeues it (jobs/cluster/executors.py); the test sends that same signal with ``scancel
    --signal=USR2`` once a unit has spooled its first example, rather than waiting out a real limit
    (at least a minute, and the rerun would meet it again). Examples are typed live at 25 chars/s, so
    each takes seconds of real time (sleeping, not computing): the unit is still mid-way when the
    signal lands. What must hold: the rerun's run record says examples were resumed from the spool,
    every (cell, example) is written exactly once, the spool is gone, and Slurm records the requeue."""
    results = tmp_path / "r"
    grid = _grid(results, f"models=[{STANDINS[0]},{STANDINS[2]}]", f"limit={UNIT}", f"shard_size={UNIT}",
                 "typing.chars_per_s=[50]", "typing.live_policy=every")
    job = executors.submit_grid(grid, _cluster(tmp_path))
    spools = results / "spool"

    def mid_unit() -> bool:  # a unit has finished some examples, not all: its spool holds 1..UNIT-1 lines
        lines = [f.read_bytes().count(b"\n") for f in spools.glob("*.jsonl")] if spools.is_dir() else []
        return any(0 < n < UNIT for n in lines)

    _wait(mid_unit, job, "no unit spooled an example in attempt 0")
    subprocess.run(["scancel", "--signal=USR2", job.job_id], check=True, timeout=30)  # what the time limit sends
    summary = executors.follow(job, poll_s=1.0)
    head_log = job.paths.stderr.read_text()
    assert "attempt 1" in head_log, head_log[-3000:]
    runs = sorted(_runs(results), key=lambda r: r["started_at"])
    assert [(r["status"], r["stop_signal"]) for r in runs] == [("interrupted", "SIGUSR2"), ("finished", None)]
    assert runs[1]["status"] == "finished" and runs[1]["examples_resumed"] > 0  # decoded once, in attempt 0
    assert summary.examples_resumed == runs[1]["examples_resumed"]
    expected = sum(len(s.example_ids) for s in plan_grid(grid).shards)  # every (cell, example) of the plan
    keys = [(r["cell_id"], r["example_id"]) for r in read_pairs(results)]
    assert len(keys) == len(set(keys)) == expected
    assert not list(spools.glob("*.jsonl")), "the spool is removed once the unit's shards are written"
    assert _final_states(job.job_id) == ["REQUEUED", "COMPLETED"]  # Slurm's own record
