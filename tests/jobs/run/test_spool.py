"""A work unit killed mid-way resumes from its finished examples (jobs/run/spool.py, issue 38).

The actor runs in-process on scripted ``calibrated`` models (an autoregressive and a LLaDA-style one:
greedy and τ=0.5 keep different draft lengths, so the unit's two cells differ after the shared step 1).
A kill is an exception that no example catches (``Killed``, a ``BaseException`` like the
``SystemExit`` a SIGTERM'd worker raises), thrown when the actor is about to decode example ``K+1``;
the rerun is a fresh actor on the same spool. What must hold: the spool holds exactly the K finished
examples, the rerun decodes exactly the other N−K (the calls counted at the actor, the model calls
from the rows' own formula), and the rows equal an uninterrupted run's rows in every column that does
not differ run to run — the resumed examples' wall clocks are the killed attempt's measured ones.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import pickle
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bench.compare_results import comparable
from jobs.grid.plan import GridPlan, plan_grid
from jobs.grid.shard_tasks import DecodedShard, ExampleTask, Placement, ShardTask
from jobs.grid.units import group_shards
from jobs.run import actors
from jobs.run.actors import ModelActor
from jobs.run.rows import ShardRows, score_unit
from jobs.run.spool import SpoolKey, UnitSpool, spool_path
from streamgen.config import grid_config
from tests.support.forward_count import predicted_forwards_executed

ray = pytest.importorskip("ray")

MODELS = ["scripted-ar-calibrated", "scripted-llada-calibrated"]
N, K = 5, 2  # examples in the unit; examples finished when it is killed


class Killed(BaseException):
    """Stands in for the kill: no example's error handling catches it."""


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> GridPlan:
    out = tmp_path_factory.mktemp("spool-plan")
    return plan_grid(grid_config("scripted", [f"models=[{','.join(MODELS)}]", "acceptance=[greedy,threshold]",
                                              "taus=[0.5]", f"limit={N}", f"shard_size={N}", "granularity=chars",
                                              "segment_chars=60", f"results_dir={out}"]))


def _tasks(plan: GridPlan, model: str, *, share: bool = True, code_version: str = "test") -> tuple[ShardTask, ...]:
    [unit] = group_shards([s for s in plan.shards if s.model_name == model], share=share)[:1]
    return tuple(plan.task(s, "run", code_version) for s in unit)


def _run(plan: GridPlan, model: str, tasks: Sequence[ShardTask], spool: Path | None, monkeypatch: pytest.MonkeyPatch,
         kill_after: int | None = None) -> tuple[list[str], tuple[DecodedShard, ...] | None]:
    """One attempt on a fresh actor: (example ids it decoded, its decoded unit — None when killed)."""
    decoded_ids: list[str] = []
    run_shared = ModelActor._run_shared

    def counting(self: Any, decoder: Any, rules: Any, exs: Sequence[ExampleTask]) -> Any:
        if kill_after is not None and len(decoded_ids) == kill_after:
            raise Killed
        decoded_ids.append(exs[0].example_id)
        return run_shared(self, decoder, rules, exs)

    monkeypatch.setattr(ModelActor, "_run_shared", counting)
    actor = ModelActor(plan.models[model])
    try:
        return decoded_ids, actor.run_unit(tasks, str(spool) if spool is not None else None)
    except Killed:
        return decoded_ids, None
    finally:
        monkeypatch.setattr(ModelActor, "_run_shared", run_shared)


def _spool(tasks: Sequence[ShardTask], spool_dir: Path, code_version: str = "test") -> UnitSpool:
    return UnitSpool(spool_path(spool_dir.parent, tasks[0].shard.shard_id),
                     SpoolKey(tuple(t.shard.shard_id for t in tasks), "cpu", code_version))


def _rows(rows: Sequence[ShardRows], kind: str) -> dict[tuple, dict[str, Any]]:
    key = ("shard_id", "example_id") + (("step",) if kind == "steps" else ())
    return {tuple(getattr(r, k) for k in key): comparable(dataclasses.asdict(r))
            for shard in rows for r in getattr(shard, kind)}


def _killed_spool(plan: GridPlan, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A spool directory holding a unit killed after K examples."""
    folder = tmp_path / "spool"
    folder.mkdir()
    decoded, result = _run(plan, model, _tasks(plan, model), folder, monkeypatch, kill_after=K)
    assert result is None and len(decoded) == K
    return folder


@pytest.mark.parametrize("model", MODELS)
def test_a_unit_killed_after_k_examples_decodes_only_the_rest_on_rerun(plan: GridPlan, model: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = _tasks(plan, model)
    ids = list(tasks[0].shard.example_ids)
    assert len(tasks) == 2 and len(ids) == N  # one unit: greedy and τ=0.5 over the same N examples
    full_ids, full = _run(plan, model, tasks, None, monkeypatch)
    assert full is not None and full_ids == ids
    full_rows = score_unit(tasks, full)

    folder = _killed_spool(plan, model, tmp_path, monkeypatch)
    spooled = _spool(tasks, folder).load()
    assert list(spooled) == ids[:K], "the spool holds exactly the examples finished before the kill"
    assert all(r.resumed for rs in spooled.values() for r in rs)

    rerun_ids, rerun = _run(plan, model, tasks, folder, monkeypatch)
    assert rerun is not None and rerun_ids == ids[K:], "the rerun decodes exactly the N-K unfinished examples"
    assert [d.resumed for d in rerun] == [K, K]
    rows = score_unit(tasks, rerun)
    for kind in ("pairs", "steps"):
        assert _rows(rows, kind) == _rows(full_rows, kind), kind
    # the model calls of this attempt are those the rows of the N-K decoded examples imply
    fresh_pairs = [dataclasses.asdict(p) for r in rows for p in r.pairs if p.example_id in rerun_ids]
    fresh_steps = [dataclasses.asdict(s) for r in rows for s in r.steps if s.example_id in rerun_ids]
    assert sum(d.forwards_executed for d in rerun) == predicted_forwards_executed(fresh_pairs, fresh_steps, share=True)
    assert sum(d.forwards_executed for d in rerun) < sum(d.forwards_executed for d in full)
    # the resumed examples' measured clocks are the killed attempt's, from the spool
    for shard, task in enumerate(tasks):
        for pair in rows[shard].pairs:
            if pair.example_id in spooled:
                outcome = spooled[pair.example_id][shard].outcome
                assert outcome is not None and pair.base_wall_s == outcome.base.wall_s, (task.cell.label, pair.example_id)
    assert {p["run_order"] for p in _rows(rows, "pairs").values()} == {"base_first", "stream_first"}


@pytest.mark.parametrize("mismatch", ["shards", "code_version", "device"])
def test_a_stale_or_foreign_spool_is_not_reused(plan: GridPlan, mismatch: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The same file name (the unit's first shard id), lines written for another unit: the unit of the
    first shard alone (``share_work: false``), another code version, another device."""
    model = MODELS[0]
    folder = _killed_spool(plan, model, tmp_path, monkeypatch)
    tasks = _tasks(plan, model, share=mismatch != "shards", code_version="other" if mismatch == "code_version" else "test")
    if mismatch == "device":
        monkeypatch.setattr(actors, "pick_device", lambda cpu_fallback=False: ("cpu", "cuda:Other GPU", Placement()))
    with caplog.at_level(logging.WARNING, logger="jobs.run.spool"):
        decoded, result = _run(plan, model, tasks, folder, monkeypatch)
    assert result is not None and decoded == list(tasks[0].shard.example_ids), "every example decoded again"
    assert [d.resumed for d in result] == [0] * len(tasks)
    why = {"shards": "stale or foreign", "code_version": "by code test", "device": "decoded on cpu"}[mismatch]
    [warning] = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert str(folder / f"{tasks[0].shard.shard_id}.jsonl") in warning and why in warning, warning
    assert f"skipped {K} of {K} lines" in warning


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_spool_line_is_skipped_with_a_warning(plan: GridPlan, damage: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The last line cut in half (killed while writing it) or a changed byte in its payload: that
    example is decoded again, the first is reused, and the rerun's own lines stay whole after it."""
    model = MODELS[0]
    folder = _killed_spool(plan, model, tmp_path, monkeypatch)
    tasks = _tasks(plan, model)
    path = _spool(tasks, folder).path
    first, second = path.read_bytes().splitlines(keepends=True)
    if damage == "truncated":
        second = second[: len(second) // 2]  # no newline: the next append must not glue onto it
    else:  # a changed value that still unpickles (a flipped bit in a float): only the checksum sees it
        doc = json.loads(second)
        results = pickle.loads(base64.b64decode(doc["results"]))
        changed = (dataclasses.replace(results[0], wall_s=results[0].wall_s + 1.0), *results[1:])
        doc["results"] = base64.b64encode(pickle.dumps(changed)).decode()
        second = json.dumps(doc).encode() + b"\n"
    path.write_bytes(first + second)
    with caplog.at_level(logging.WARNING, logger="jobs.run.spool"):
        decoded, result = _run(plan, model, tasks, folder, monkeypatch)
    ids = list(tasks[0].shard.example_ids)
    assert result is not None and decoded == ids[1:] and [d.resumed for d in result] == [1, 1]
    [warning] = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert str(path) in warning and "line 2: damaged" in warning and "skipped 1 of 2 lines" in warning, warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jobs.run.spool"):
        assert list(_spool(tasks, folder).load()) == ids, "the damaged line is skipped, every other line reads"
    assert "line 2: damaged" in caplog.text


# ---------------------------------------------------------------- the grid: a real actor killed mid-unit

GRID = ["models=[tiny-llama]", "benchmarks=[coedit]", "limit=24", "shard_size=24", "acceptance=[greedy,threshold]",
        "taus=[0.5]", "max_new_tokens=16", "workers=1"]


def _table(results: Path, table: str) -> list[dict[str, Any]]:
    return [r for f in sorted((results / table).rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]


@pytest.mark.integration
def test_an_actor_killed_mid_unit_is_requeued_and_resumes_from_its_spool(tmp_path: Path) -> None:
    """Real Ray: the unit's actor is killed once K examples are spooled; the scheduler requeues the unit
    on a fresh actor, which decodes only the examples not spooled. The rows equal an uninterrupted run's,
    the run record says how many were resumed, and the spool is gone once the shards are written."""
    from jobs.run.driver import run_grid

    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    run_grid(grid_config("smoke", [*GRID, f"results_dir={full_dir}"]), progress=False)
    grid = grid_config("smoke", [*GRID, f"results_dir={killed_dir}"])
    dispatched: list[str] = []

    def kill_once_k_are_spooled(actor: Any, unit: Any) -> None:
        dispatched.append(unit.key)
        if len(dispatched) > 1:
            return
        spool, deadline = spool_path(killed_dir, unit.key), time.monotonic() + 240  # 24 examples take ~10 s
        while not spool.exists() or spool.read_bytes().count(b"\n") < K:
            assert time.monotonic() < deadline, f"the actor spooled fewer than {K} examples in 4 minutes"
            time.sleep(0.01)
        ray.kill(actor, no_restart=True)

    summary = run_grid(grid, progress=False, on_dispatch=kill_once_k_are_spooled)
    assert len(dispatched) == 2 and len(set(dispatched)) == 1, "one unit, dispatched again after the kill"
    cells, n = 2, 24
    resumed = summary.examples_resumed // cells
    assert summary.examples_resumed == resumed * cells and K <= resumed < n, summary.examples_resumed
    pairs, steps = _table(killed_dir, "pairs"), _table(killed_dir, "steps")
    key = {"pairs": ("shard_id", "example_id"), "steps": ("shard_id", "example_id", "step")}
    for table, got in (("pairs", pairs), ("steps", steps)):
        want = {tuple(r[k] for k in key[table]): comparable(r) for r in _table(full_dir, table)}
        assert {tuple(r[k] for k in key[table]): comparable(r) for r in got} == want, table
    # the resumed examples are the unit's first ones (the spool fills in order); the rest ran now
    order = list(plan_grid(grid).shards[0].example_ids)
    fresh = set(order[resumed:])
    assert summary.forwards_executed == predicted_forwards_executed(
        [p for p in pairs if p["example_id"] in fresh], [s for s in steps if s["example_id"] in fresh], share=True)
    [record] = _table(killed_dir, "runs")
    assert record["examples_resumed"] == summary.examples_resumed and record["forwards_executed"] == summary.forwards_executed
    assert not list((killed_dir / "spool").iterdir()), "the spool is removed once the shards are written"
