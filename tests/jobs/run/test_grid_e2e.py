"""Whole grids through run_grid on real Ray with tiny random models (integration).

One Ray session for the module, started with fake GPUs (``num_gpus=2``): model actors are placed
with ``num_gpus=1`` and ``num_cpus=1`` each, and the runs are rehearsals (``rehearsal: true``): the actors
run on the CPU, there being no CUDA here, and say so. Ray has 3 CPUs: 2 GPU actors + 1 scorer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

from jobs.grid.plan import plan_grid  # noqa: E402
from jobs.run.driver import run_grid  # noqa: E402
from jobs.run.local_ray import start_ray, stop_ray  # noqa: E402
from jobs.run.writer import ResultWriter  # noqa: E402
from streamgen.config import ClusterConfig, RayConfig, grid_config  # noqa: E402

pytestmark = pytest.mark.integration

SMALL = ["models=[tiny-llama]", "benchmarks=[mbpp,coedit]", "limit=3", "shard_size=1", "acceptance=[greedy]",
         "max_new_tokens=12", "workers=2"]


@pytest.fixture(scope="module", autouse=True)
def ray_session(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    os.environ["HOME"] = str(tmp_path_factory.mktemp("home"))
    session = start_ray(RayConfig(num_cpus=3, num_gpus=2, object_store_mb=128), default_num_cpus=3)
    yield
    stop_ray(session)


REHEARSAL = ClusterConfig(name="rehearsal", rehearsal=True)  # fake GPUs: actors run on CPU, recorded


def _run(grid: Any, **kw: Any) -> Any:
    return run_grid(grid, cluster=REHEARSAL, **kw)


def rows(results: Path, table: str) -> list[dict[str, Any]]:
    files = sorted((results / table).rglob("*.parquet"))
    return [r for f in files for r in pq.read_table(f).to_pylist()]


def merged_pairs(results: Path) -> list[dict[str, Any]]:
    """The pairs rows of every compaction batch (``merged/pairs-<batch>.parquet``)."""
    from streamgen.results.manifest import merged_dir

    return [r for f in sorted(merged_dir(results).glob("pairs-*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_killed_actor_every_shard_exactly_once(tmp_path: Path) -> None:
    grid = grid_config("smoke", [*SMALL, f"results_dir={tmp_path}"])
    dispatches: list[Any] = []

    def kill_second_actor_mid_shard(actor: Any, unit: Any) -> None:
        dispatches.append(unit.key)
        if len(dispatches) == 3:
            ray.kill(actor, no_restart=True)

    summary = _run(grid, progress=False, on_dispatch=kill_second_actor_mid_shard)
    plan = plan_grid(grid)
    expected = sorted((s.shard_id, e) for s in plan.shards for e in s.example_ids)
    pairs = rows(tmp_path, "pairs")
    got = sorted((r["shard_id"], r["example_id"]) for r in pairs)
    assert got == expected, "every (shard, example) exactly once"
    assert len(dispatches) > len(plan.shards), "the killed actor's shard was dispatched again"
    assert summary.shards_done == len(plan.shards) and not summary.shards_failed
    steps = [(r["shard_id"], r["example_id"], r["step"]) for r in rows(tmp_path, "steps")]
    assert len(steps) == len(set(steps)) > 0
    included = [r for r in pairs if r["excluded_reason"] is None and r["error_type"] is None]
    assert included and all(r["base_forwards"] >= 1 and r["residual_forwards"] >= 1 for r in included)


def test_pairing_same_actor_order_recorded_and_balanced(tmp_path: Path) -> None:
    grid = grid_config("smoke", [*SMALL, "limit=4", "shard_size=2", "benchmarks=[mbpp]", f"results_dir={tmp_path}"])
    summary = _run(grid, progress=False)
    pairs = [r for r in rows(tmp_path, "pairs") if r["error_type"] is None and r["excluded_reason"] is None]
    assert len(pairs) == 4
    # both runs of an example are one actor call: one actor id per row, one per shard, a known actor
    assert all(r["actor_id"] in summary.devices for r in pairs)
    by_shard: dict[str, set[str]] = {}
    for r in pairs:
        by_shard.setdefault(r["shard_id"], set()).add(r["actor_id"])
    assert all(len(a) == 1 for a in by_shard.values())
    orders = [r["run_order"] for r in pairs]
    assert set(orders) <= {"base_first", "stream_first"}
    assert orders.count("base_first") == orders.count("stream_first") == 2
    # the order comes from the seed: the plan says the same thing the rows say
    plan = {(s.shard_id, e): b for s in plan_grid(grid).shards for e, b in zip(s.example_ids, s.base_first, strict=True)}
    assert all((r["run_order"] == "base_first") == plan[(r["shard_id"], r["example_id"])] for r in pairs)
    runs = rows(tmp_path, "runs")
    assert len(runs) == 1 and runs[0]["finished_at"] and '"GPU": 2.0' in runs[0]["device_inventory"]
    assert "tiny-llama" in runs[0]["config_yaml"] and runs[0]["shards_done"] == 2
    assert runs[0]["model_snapshots"] == '{"tiny-llama": null}'  # not a hub model: no snapshot (jobs/grid/checkpoint_preflight.py)


def test_damaged_shard_file_is_recomputed_and_the_rest_reused(tmp_path: Path) -> None:
    grid = grid_config("smoke", [*SMALL, "benchmarks=[coedit]", "workers=1", f"results_dir={tmp_path}"])
    first = _run(grid, progress=False)
    before = {(r["shard_id"], r["example_id"]): r for r in rows(tmp_path, "pairs")}
    files = sorted((tmp_path / "pairs").rglob("*.parquet"))
    damaged = files[0]
    damaged.write_bytes(damaged.read_bytes()[:100])  # truncated
    second = _run(grid, progress=False)
    assert (second.shards_skipped, second.shards_done) == (first.shards_total - 1, 1)
    after = {(r["shard_id"], r["example_id"]): r for r in rows(tmp_path, "pairs")}
    assert after.keys() == before.keys()
    for key, row in after.items():
        for col in ("base_forwards", "residual_forwards", "speculative_forwards", "base_answer", "stream_answer"):
            assert row[col] == before[key][col], (key, col)
    assert all(ResultWriter(tmp_path).is_done(s) for s in plan_grid(grid).shards)
    assert len(rows(tmp_path, "runs")) == 2


def test_example_errors_are_rows_and_the_run_stops_past_max_error_fraction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from jobs.run.driver import GridAborted
    from streamgen.config import configs_dir

    # A model whose context (64 tokens) no request fits: run_pair raises for every example.
    configs = tmp_path / "configs"
    shutil.copytree(configs_dir(), configs)
    text = (configs / "models" / "tiny-llama.yaml").read_text().replace("name: tiny-llama", "name: tiny-short")
    (configs / "models" / "tiny-short.yaml").write_text(text + "max_context: 64\n")
    monkeypatch.setenv("STREAMGEN_CONFIGS", str(configs))
    results = tmp_path / "results"
    grid = grid_config("smoke", [*SMALL, "models=[tiny-short]", "benchmarks=[mbpp]", "workers=1",
                                 "max_error_fraction=0.0", f"results_dir={results}"])
    with pytest.raises(GridAborted, match="max_error_fraction=0.0"):
        _run(grid, progress=False)
    errors = [r for r in rows(results, "pairs") if r["error_type"] is not None]
    assert errors, "the failing example was written as a row"
    assert all(r["error_traceback"] and "Traceback" in r["error_traceback"] for r in errors)
    assert all(r["base_forwards"] is None and r["residual_forwards"] is None for r in errors)
    written = len(list((results / "pairs").rglob("*.parquet")))
    assert written < len(plan_grid(grid).shards), "the run stopped before the end"
    runs = rows(results, "runs")
    assert len(runs) == 1 and runs[0]["finished_at"] is not None


def test_live_grid_by_word_records_the_timeline(tmp_path: Path) -> None:
    """typing.live_policy on the grid: the stream runs on the real clock, rows carry arrivals and starts."""
    grid = grid_config("smoke", ["models=[tiny-llama]", "benchmarks=[coedit]", "limit=2", "max_new_tokens=4",
                                 "granularity=word", "typing.chars_per_s=[2000]", "typing.live_policy=every",
                                 f"results_dir={tmp_path}"])
    summary = _run(grid, progress=False)
    assert summary.shards_done == len(plan_grid(grid).shards) and not summary.shards_failed
    pairs, steps = rows(tmp_path, "pairs"), rows(tmp_path, "steps")
    assert {p["live_policy"] for p in pairs} == {"every"} and {p["live_chars_per_s"] for p in pairs} == {2000.0}
    assert all(p["n_segments"] > 5 for p in pairs)  # words, not sentences
    for s in steps:  # no step starts before its segment has been typed
        assert s["arrival_s"] == pytest.approx(s["prefix_chars"] / 2000.0 - s["pasted_chars"] / 2000.0)
        assert s["start_s"] >= s["arrival_s"] - 1e-6


def test_local_ray_listens_and_connects_on_loopback_only() -> None:
    import psutil

    @ray.remote(num_cpus=0.5)
    class Probe:
        def pid(self) -> int:
            return os.getpid()

    probe = Probe.remote()
    assert ray.get(probe.pid.remote(), timeout=120) > 0
    loopback = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
    seen, outside = 0, []
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.Error:
            continue  # exited meanwhile
        for c in conns:
            seen += 1
            for addr in (c.laddr, c.raddr):
                if addr and addr.ip not in loopback:
                    outside.append((proc.name(), c.status, addr.ip, addr.port))
    ray.kill(probe)
    assert seen > 10, "the Ray processes' sockets were not visible"
    assert not outside, outside
    assert all(n["NodeManagerAddress"] == "127.0.0.1" for n in ray.nodes())


def test_a_sandbox_that_cannot_run_answers_fails_the_run_loudly(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every answer a sandbox `error` after its retries must not finish as a green run with a quiet
    column of `error` verdicts: the run raises, naming the fix, and writes no such shard."""
    import shutil

    from jobs.run.driver import GridAborted, SandboxUnavailable
    from streamgen.config import configs_dir

    configs = tmp_path / "configs"
    shutil.copytree(configs_dir(), configs)
    import yaml as pyyaml

    path = configs / "benchmarks" / "humaneval.yaml"
    bench = pyyaml.safe_load(path.read_text())
    bench.setdefault("options", {})["python"] = "/bin/false"  # runs, but no Python: nothing starts
    path.write_text(pyyaml.safe_dump(bench))
    monkeypatch.setenv("STREAMGEN_CONFIGS", str(configs))
    results = tmp_path / "results"
    grid = grid_config("smoke", [*SMALL, "benchmarks=[humaneval]", "limit=2", "workers=1", "max_error_fraction=1.0",
                                 f"results_dir={results}"])
    with pytest.raises(SandboxUnavailable, match="streamgen.benchmarks check humaneval") as caught:
        _run(grid, progress=False)
    assert isinstance(caught.value, GridAborted)  # the workflows' handler reports it and exits 1
    assert "could not describe itself" in str(caught.value)  # the sandbox's own reason is carried
    assert not (results / "pairs").exists() or not list((results / "pairs").rglob("*.parquet"))


def test_rows_record_the_sandbox_backend_and_view(tmp_path: Path) -> None:
    from streamgen.scoring.sandbox import select_backend, view_name

    grid = grid_config("smoke", [*SMALL, "benchmarks=[humaneval]", "limit=2", "workers=1",
                                 f"results_dir={tmp_path}"])
    _run(grid, progress=False)
    pairs = rows(tmp_path, "pairs")
    ran = [r for r in pairs if r["sandbox_backend"] is not None]
    assert ran, "no answer of the grid reached the sandbox"  # humaneval completions always run
    backend = select_backend()
    assert {(r["sandbox_backend"], r["sandbox_view"]) for r in ran} == {(backend, view_name(backend))}
    assert all(r["sandbox_view"] is None for r in pairs if r["sandbox_backend"] is None)


def test_a_run_compacts_at_its_end_and_a_rerun_finds_every_shard_in_the_manifest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's end-of-run compaction, through Ray: the study's threshold (256 loose shards) lowered to
    this grid's size, so the run itself merges every shard (no reader's compaction is involved)."""
    from analysis.tables import build_tables
    from jobs.run import driver
    from streamgen.results.compaction import loose_shards
    from streamgen.results.manifest import read_manifest

    grid = grid_config("smoke", [*SMALL, f"results_dir={tmp_path}"])
    plan = plan_grid(grid)
    monkeypatch.setattr(driver, "AUTO_COMPACT_SHARDS", len(plan.shards))
    summary = _run(grid, progress=False)
    assert summary.shards_done == len(plan.shards) == 6 and not summary.shards_failed  # 2 benchmarks x 3 examples
    manifest = read_manifest(tmp_path)
    assert sorted(manifest.shards) == sorted(s.shard_id for s in plan.shards)
    assert len(manifest.batches) == 1  # one compaction, at the end
    assert loose_shards(tmp_path, manifest) == []
    assert rows(tmp_path, "pairs") == [] and rows(tmp_path, "steps") == []  # no per-shard file left
    merged = merged_pairs(tmp_path)
    expected = sorted((s.shard_id, e) for s in plan.shards for e in s.example_ids)
    assert sorted((r["shard_id"], r["example_id"]) for r in merged) == expected  # every pair once
    cells = build_tables(tmp_path, ["cells"], threads=1)["cells"].to_pylist()
    assert sum(r["n_total"] for r in cells if r["scope"] == "benchmark") == len(expected)
    rerun = _run(grid, progress=False)
    assert (rerun.shards_skipped, rerun.shards_done) == (len(plan.shards), 0)
    assert read_manifest(tmp_path).batches == manifest.batches  # nothing recomputed, nothing merged again


def test_a_run_stopped_midway_leaves_at_most_compact_every_loose_shards_and_every_row_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compaction during the run (``COMPACT_EVERY_SHARDS``, lowered from 1,000 to 2): a run stopped as its
    4th shard is about to be written has merged its first 2 as it ran and left the 3rd in per-shard files."""
    from jobs.run import driver
    from streamgen.results import compaction
    from streamgen.results.compaction import loose_shards
    from streamgen.results.manifest import read_manifest

    every, stop_at = 2, 4
    monkeypatch.setattr(compaction, "COMPACT_EVERY_SHARDS", every)
    grid = grid_config("smoke", [*SMALL, f"results_dir={tmp_path}"])
    plan = plan_grid(grid)
    write = driver.GridRun._finish_shard
    calls: list[str] = []

    class Stop(Exception):
        pass

    def stop_before_the_fourth(run: Any, task: Any, shard_rows: Any) -> None:
        calls.append(task.shard.shard_id)
        if len(calls) == stop_at:  # as a stop signal would, between two shards
            raise Stop
        write(run, task, shard_rows)

    monkeypatch.setattr(driver.GridRun, "_finish_shard", stop_before_the_fourth)
    with pytest.raises(Stop):
        _run(grid, progress=False)
    written = stop_at - 1  # one shard per unit here
    manifest = read_manifest(tmp_path)
    loose = loose_shards(tmp_path, manifest)
    assert len(manifest.shards) == every * (written // every) and len(manifest.batches) == written // every
    assert len(loose) == written % every < every  # the bound: fewer than `every` left loose
    assert set(manifest.shards) | {s.shard_id for s in loose} == set(calls[:written])
    merged = merged_pairs(tmp_path)
    got = sorted((r["shard_id"], r["example_id"]) for r in merged + rows(tmp_path, "pairs"))
    assert len(got) == len(set(got)) == written  # every written row once (1 example a shard)
    monkeypatch.setattr(driver.GridRun, "_finish_shard", write)
    rerun = _run(grid, progress=False)
    assert rerun.shards_skipped == written
    final = read_manifest(tmp_path)
    merged = merged_pairs(tmp_path)
    got = sorted((r["shard_id"], r["example_id"]) for r in merged + rows(tmp_path, "pairs"))
    assert got == sorted((s.shard_id, e) for s in plan.shards for e in s.example_ids)
    assert len(final.shards) + len(loose_shards(tmp_path, final)) == len(plan.shards)
