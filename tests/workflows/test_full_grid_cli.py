"""workflows/full_grid.py as a user runs it: real subprocesses, each with its own loopback Ray.

- a bad config fails before anything starts, with one message listing every problem;
- SIGKILL of the driver mid-run, then the same command again: the final result set equals an
  uninterrupted run's (same rows, forward counts, answers), nothing duplicated;
- a fresh clone alone (no sibling data folder) runs the smoke grid on its own data/ and prints the tables.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from jobs.grid.plan import plan_grid
from streamgen.config import REPO_ROOT, ConfigError, benchmark_config, grid_config

WORKFLOW = REPO_ROOT / "workflows" / "full_grid.py"
# 12 one-example shards of a tiny model: long enough to kill the driver in the middle.
SMALL = ["grid=smoke", "models=[tiny-llama]", "benchmarks=[mbpp,coedit]", "limit=3", "shard_size=1",
         "max_new_tokens=12", "workers=1"]
# Columns that must not change between an interrupted+resumed run and an uninterrupted one.
SAME = ("n_segments", "excluded_reason", "error_type", "base_forwards", "residual_forwards",
        "speculative_forwards", "base_tokens_fed", "residual_tokens_fed", "draft_tokens_final",
        "accepted_tokens_final", "base_answer", "stream_answer", "base_quality", "stream_quality", "run_order")
STEP_SAME = ("prefix_chars", "draft_tokens_in", "accepted_tokens", "generated_tokens", "forwards", "tokens_fed")


def _env(home: Path) -> dict[str, str]:
    """The test's environment (conftest cleared STREAMGEN_DATA_DIR: each checkout reads its own data/)."""
    return {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}


def _run(args: list[str], home: Path, cwd: Path = REPO_ROOT, script: Path = WORKFLOW,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=_env(home), capture_output=True,
                          text=True, timeout=timeout)


def _rows(results: Path, table: str) -> list[dict[str, Any]]:
    return [r for f in sorted((results / table).rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_bad_config_fails_before_anything_starts(tmp_path: Path) -> None:
    results = tmp_path / "results"
    bad = ["models=[tiny-llama,no-such-model]", "benchmarks=[mbpp,no-such-bench]", "acceptance=[threshold]",
           "taus=[1.5]", f"data_dir={tmp_path / 'missing'}", f"results_dir={results}"]
    proc = _run(["grid=smoke", *bad], tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    message = proc.stderr
    for needle in ("no-such-model", "no-such-bench", "taus has 1.5", str(tmp_path / "missing"), "4 problems"):
        assert needle in message, (needle, message)
    assert not results.exists(), "nothing may be written before validation passes"
    assert "starting local Ray" not in message and "started an actor" not in message


def test_a_pilot_count_that_is_no_number_is_one_line_naming_the_fix(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from workflows.full_grid import main

    assert main(["grid=smoke", f"results_dir={tmp_path / 'r'}", "--dry-run", "--calibrate", "--pilot=two"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --pilot=two: give the examples the pilot decodes per unit kind as a whole number "
                   "(--pilot=0: no pilot)"]
    assert not (tmp_path / "r").exists()


def test_bad_config_raises_one_config_error_in_process(tmp_path: Path) -> None:
    import ray

    from jobs.run.driver import run_grid

    grid = grid_config("smoke", ["models=[nope]", "taus=[-0.1]", f"results_dir={tmp_path}/r"])
    with pytest.raises(ConfigError) as info:
        run_grid(grid, progress=False)
    assert len(info.value.problems) == 2
    assert not ray.is_initialized()


def _kill_when(proc: subprocess.Popen[str], results: Path, n_files: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        done = len(list((results / "pairs").rglob("*.parquet"))) if results.exists() else 0
        if done >= n_files:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            return done
        time.sleep(0.05)
    raise AssertionError(f"the run ended or stalled before {n_files} shards were written")


@pytest.mark.integration
@pytest.mark.slow
def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    args = [*SMALL, f"results_dir={killed}"]
    proc = subprocess.Popen([sys.executable, str(WORKFLOW), *args], cwd=REPO_ROOT, env=_env(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    # Killed at the first shard file: the tiny grid writes its 12 files within a second or two once
    # the actor has loaded, so waiting for more risks a run that ends before the kill (a loaded
    # machine delays this poll). A unit's two shards are written one after the other: the kill may
    # fall between them, and the rerun then computes the unit's other shard (counted below).
    done_at_kill = _kill_when(proc, killed, 1, timeout=400)
    assert done_at_kill < 12, "the run wrote every shard before it was killed: nothing to resume"
    resumed = _run(args, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    counts = re.search(r"(\d+) shards computed, (\d+) already done", resumed.stdout)
    assert counts, resumed.stdout[-2000:]
    computed, skipped = int(counts[1]), int(counts[2])
    # a shard may land between the count and the kill: at least those counted were skipped, none twice
    assert done_at_kill <= skipped < 12 and computed + skipped == 12
    full = _run([*SMALL, f"results_dir={clean}"], tmp_path)
    assert full.returncode == 0, full.stderr[-3000:]

    def keyed(results: Path, table: str, key: tuple[str, ...], cols: tuple[str, ...]) -> dict:
        rows = _rows(results, table)
        out = {tuple(r[k] for k in key): tuple(r[c] for c in cols) for r in rows}
        assert len(out) == len(rows), f"duplicate {table} rows in {results}"
        return out

    pair_key, step_key = ("shard_id", "example_id"), ("shard_id", "example_id", "step")
    assert keyed(killed, "pairs", pair_key, SAME) == keyed(clean, "pairs", pair_key, SAME)
    assert keyed(killed, "steps", step_key, STEP_SAME) == keyed(clean, "steps", step_key, STEP_SAME)
    assert len(_rows(killed, "pairs")) == 12
    assert not list(killed.rglob(".*.tmp-*")), "temporary files left behind after the resume"


@pytest.mark.integration
@pytest.mark.slow
def test_smoke_grid_on_a_fresh_clone_with_no_shared_folder(tmp_path: Path) -> None:
    """The repository alone, cloned into an empty folder (no sibling data folder, no
    STREAMGEN_DATA_DIR): the smoke grid runs to completion on the clone's own data/."""
    empty = tmp_path / "empty"
    empty.mkdir()
    clone = empty / "streamgen"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True, timeout=120)
    assert [p.name for p in empty.iterdir()] == ["streamgen"] and "STREAMGEN_DATA_DIR" not in _env(tmp_path)
    results = tmp_path / "results"
    proc = _run(["grid=smoke", f"results_dir={results}"], tmp_path, cwd=clone,
                script=Path("workflows/full_grid.py"), timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Quality and residual speedup" in proc.stdout or "| Benchmark" in proc.stdout, proc.stdout[-2000:]
    # every example of every cell has its row: the plan of the same grid here says how many
    pairs = _rows(results, "pairs")
    assert len(pairs) == sum(len(s) for s in plan_grid(grid_config("smoke")).shards) > 0
    assert not [r for r in pairs if r["error_type"]], "no example may fail on a fresh clone"
    # the data came from the clone's data/: the resolved config names it, the versions carry its sha256
    (run,) = _rows(results, "runs")
    assert OmegaConf.create(run["config_yaml"]).data_dir == str(clone / "data")
    for bench in grid_config("smoke").benchmarks:
        cfg = benchmark_config(bench)
        sha = hashlib.sha256((clone / "data" / cfg.data_file).read_bytes()).hexdigest()[:8]
        assert {r["benchmark_version"] for r in pairs if r["benchmark"] == bench} == {f"{cfg.version}+{sha}"}
    # the clone's own code ran (driver and Ray workers): its clean commit, not this checkout's state
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert {r["code_version"].split("+g")[-1] for r in pairs} == {head}
