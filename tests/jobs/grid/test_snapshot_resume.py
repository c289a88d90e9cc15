"""Results tied to the weights: the snapshot commit pinned into the plan's model configs, the cell
fingerprints and the runs rows; a resume across a changed snapshot refused with one message; the
study grid's dry run on a machine without the checkpoints (one line per missing checkpoint)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from jobs.grid.checkpoint_preflight import preflight, recorded_snapshots, snapshot_conflicts
from jobs.grid.plan import plan_grid
from jobs.run.writer import ResultWriter
from streamgen.config import ConfigError, grid_config, model_config
from streamgen.results.records import SCHEMA_VERSION, RunRecord
from tests.support.checkpoint_cache import COMMIT, STUDY_MODELS, write_snapshot

OLD = "a" * 40


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


def _run_row(run_id: str, started_at: str, snapshots: dict[str, str | None] | None) -> RunRecord:
    return RunRecord(run_id, "smoke", "", "test", "host", "{}", started_at, None, 1, 1, 0, SCHEMA_VERSION,
                     model_snapshots=None if snapshots is None else json.dumps(snapshots))


def _grid(results: Path, *more: str):
    return grid_config("smoke", ["models=[dream-7b]", "benchmarks=[coedit]", "limit=1", f"results_dir={results}", *more])


def test_snapshot_conflicts_compare_with_the_latest_recorded_commit(tmp_path: Path) -> None:
    earlier = [("2026-01-01", "r1", {"m": OLD, "t": None}), ("2026-01-02", "r2", {"m": COMMIT})]
    assert snapshot_conflicts(earlier, {"m": COMMIT, "t": None}, tmp_path) == []  # r2 already moved to COMMIT
    (line,) = snapshot_conflicts(earlier[:1], {"m": COMMIT, "t": None}, tmp_path)
    assert f"snapshot {OLD} (run r1)" in line and f"would load snapshot {COMMIT}" in line
    assert f"pin `revision: {OLD}` in configs/models/m.yaml" in line and "new results_dir" in line
    assert snapshot_conflicts(earlier, {"other": COMMIT}, tmp_path) == []  # a model never run here


def test_recorded_snapshots_reads_runs_rows_old_and_new(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path)
    writer.write_run(_run_row("r1", "2026-01-01T00:00:00", None))  # a row from before the column: no snapshots
    writer.write_run(_run_row("r2", "2026-01-02T00:00:00", {"dream-7b": OLD}))
    assert recorded_snapshots(tmp_path) == [("2026-01-02T00:00:00", "r2", {"dream-7b": OLD})]
    writer.write_run(_run_row("r0", "2026-01-03T00:00:00", {"dream-7b": COMMIT}))  # a later run (its id sorts first)
    assert [r[1] for r in recorded_snapshots(tmp_path)] == ["r2", "r0"]  # by start time
    assert snapshot_conflicts(recorded_snapshots(tmp_path), {"dream-7b": COMMIT}, tmp_path) == []
    assert len(snapshot_conflicts(recorded_snapshots(tmp_path), {"dream-7b": OLD}, tmp_path)) == 1
    assert recorded_snapshots(tmp_path / "absent") == []


def test_the_plan_pins_the_snapshot_into_models_and_fingerprints(cache: Path, tmp_path: Path) -> None:
    write_snapshot(cache, "dream-7b")
    plan = plan_grid(_grid(tmp_path / "results"))
    assert plan.snapshots == {"dream-7b": COMMIT} and plan.models["dream-7b"].revision == COMMIT
    assert {s.cell.model.revision for s in plan.shards} == {COMMIT}  # what the actors receive
    assert all(s.cell.settings()["model.revision"] == COMMIT for s in plan.shards)


def test_a_resume_across_a_changed_snapshot_is_refused(cache: Path, tmp_path: Path) -> None:
    write_snapshot(cache, "dream-7b")
    ResultWriter(tmp_path / "results").write_run(_run_row("r1", "2026-01-01T00:00:00", {"dream-7b": OLD}))
    with pytest.raises(ConfigError) as err:
        plan_grid(_grid(tmp_path / "results"))
    (line,) = err.value.problems
    assert f"holds rows of snapshot {OLD} (run r1)" in line and f"would load snapshot {COMMIT}" in line


def test_pinning_the_old_revision_resumes(cache: Path, tmp_path: Path) -> None:
    """The fix the refusal names: ``revision: <old>`` loads the old snapshot although main moved on."""
    write_snapshot(cache, "dream-7b")
    write_snapshot(cache, "dream-7b", commit=OLD)  # refs/main now points at OLD: set it back to COMMIT
    (cache / "models--Dream-org--Dream-v0-Instruct-7B" / "refs" / "main").write_text(COMMIT)
    ResultWriter(tmp_path / "results").write_run(_run_row("r1", "2026-01-01T00:00:00", {"dream-7b": OLD}))
    pinned = preflight({"dream-7b": replace(model_config("dream-7b"), revision=OLD)})
    assert pinned.snapshots == {"dream-7b": OLD} and pinned.problems == []
    assert snapshot_conflicts(recorded_snapshots(tmp_path / "results"), pinned.snapshots, tmp_path) == []


def test_full_grid_dry_run_without_checkpoints_lists_each_with_its_download(
        cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from workflows import full_grid

    code = full_grid.main(["grid=full", "benchmarks=[coedit]", f"results_dir={tmp_path / 'r'}", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("  - ")]
    assert len(lines) == len(STUDY_MODELS)
    for model in STUDY_MODELS:
        (line,) = [x for x in lines if x.startswith(f"  - model {model}: ")]
        assert "hf download " in line
    assert sum("gated" in x for x in lines) == 2  # Llama-3.1 and Gemma-3


def test_full_grid_dry_run_passes_on_the_test_checkpoints(cache: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from workflows import full_grid

    for model in STUDY_MODELS:
        write_snapshot(cache, model)
    code = full_grid.main(["grid=full", "benchmarks=[coedit]", f"results_dir={tmp_path / 'r'}", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "dry run of grid" in out
    for model in STUDY_MODELS:  # each checkpoint went through the pre-flight and was pinned
        assert f"checkpoint {model}: snapshot {COMMIT}" in out


def test_a_slurm_submission_is_refused_before_the_gpus_are_booked(cache: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """submit_grid checks the checkpoints before anything is queued (the grid's job would run the same
    pre-flight on its head node, but only once its GPUs are allocated)."""
    from jobs.cluster import executors
    from streamgen.config import cluster_config

    submitted = []
    monkeypatch.setattr(executors, "make_executor", lambda *a, **k: submitted.append(a))
    grid = grid_config("full", ["benchmarks=[coedit]", f"results_dir={tmp_path / 'r'}"])
    with pytest.raises(ConfigError) as err:
        executors.submit_grid(grid, cluster_config("debug"))
    assert "cannot submit job" in str(err.value) and not submitted
    assert sum("hf download" in p for p in err.value.problems) == len(STUDY_MODELS)
