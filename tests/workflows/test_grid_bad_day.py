"""workflows/full_grid.py on a bad day, as real processes: a second run on a live run's results
directory, SIGTERM to the whole process group (what Slurm's ``scancel`` sends) of a local and of a
``cluster=debug`` run, a full disk and a read-only results directory on a real tmpfs, a results
directory that is a file. Each ends in one message and an exit code, never a traceback; what
finished is kept whole and a rerun resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from streamgen.config import REPO_ROOT
from streamgen.results.records import PairRecord, read_parquet_validated
from streamgen.results.results_dir import LOCK_NAME
from tests.support.fs_support import SmallDisk, repo_results_lock, small_disk

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKFLOW = REPO_ROOT / "workflows" / "full_grid.py"
# one-example shards of a tiny model, ~0.1 s each: long enough to signal in the middle
LONG = ["grid=smoke", "models=[tiny-llama]", "benchmarks=[coedit]", "limit=150", "shard_size=1", "workers=1",
        "max_new_tokens=24", "acceptance=[greedy]", "taus=[]"]
SHORT = [*LONG[:3], "limit=3", *LONG[4:]]


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO_ROOT)}


def _start(args: list[str], home: Path, slow: bool = False, **kw: Any) -> subprocess.Popen[str]:
    """The workflow in its own session (``setsid``), as a batch system starts it; ``slow``: each example
    waits 0.5 s first (tests/support/perturb), so the run outlasts what a test does while it runs."""
    env = _env(home)
    if slow:
        env.update(PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "tests" / "support" / "perturb"), str(REPO_ROOT)]),
                   STREAMGEN_TEST_PERTURB="slow-examples")
    return subprocess.Popen([sys.executable, str(WORKFLOW), *args], cwd=REPO_ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, **kw)


def _run(args: list[str], home: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(WORKFLOW), *args], cwd=REPO_ROOT, env=_env(home),
                          capture_output=True, text=True, timeout=timeout)


def _pairs_files(results: Path) -> list[Path]:
    return sorted((results / "pairs").rglob("*.parquet"))


def _wait_for_pairs(proc: subprocess.Popen[str], results: Path, n: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while len(_pairs_files(results)) < n:
        assert proc.poll() is None, f"the run ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "no shard landed in time"
        time.sleep(0.2)


def _runs(results: Path) -> list[dict[str, Any]]:
    return sorted((r for f in (results / "runs").glob("*.parquet") for r in pq.read_table(f).to_pylist()),
                  key=lambda r: r["run_id"])


def _stop_group(proc: subprocess.Popen[str]) -> tuple[int, str, float]:
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)  # the whole group: the driver and the Ray it started
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err, time.monotonic() - start


def _assert_interrupted_cleanly(rc: int, err: str, results: Path, group: int) -> dict[str, Any]:
    assert rc == 128 + signal.SIGTERM, err
    assert "interrupted by SIGTERM" in err and "resume" in err, err
    assert "Traceback" not in err and "SIGTERM received at time" not in err, err  # no stack dump, no abort
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)  # nothing of the run's process group is left behind
    for f in _pairs_files(results):
        read_parquet_validated(f, PairRecord)  # every shard that landed is whole
    assert not list(results.rglob(".*.tmp-*"))
    record = _runs(results)[-1]
    assert record["status"] == "interrupted" and record["stop_signal"] == "SIGTERM"
    assert record["finished_at"] is not None
    return record


def test_second_run_refused_then_sigterm_to_the_group_then_resume(tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = [*LONG, f"results_dir={results}"]
    # slowed (>= 75 s of wall): a second run and a dry run happen while it runs; unslowed, a loaded
    # machine once let it finish before the SIGTERM below (it then died of the signal, rc -15)
    first = _start(args, tmp_path, slow=True)
    try:
        _wait_for_pairs(first, results, 3)
        holder = json.loads((results / LOCK_NAME).read_text())
        assert holder["pid"] == first.pid
        second = _run(args, tmp_path, timeout=300)
        assert second.returncode == 1, second.stderr
        for part in (f"pid {first.pid}", holder["run_id"], "in use by", "results_dir="):
            assert part in second.stderr, (part, second.stderr)
        assert "Traceback" not in second.stderr
        dry = _run([*args, "--dry-run"], tmp_path, timeout=300)  # reads without the lock
        assert dry.returncode == 0 and "shards" in dry.stdout, dry.stderr
        assert first.poll() is None, "the first run goes on undisturbed"
        rc, err, took = _stop_group(first)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    record = _assert_interrupted_cleanly(rc, err, results, first.pid)
    assert took < 60, f"stopping took {took:.0f} s (Slurm's KillWait is 30 s by default)"
    landed = len(_pairs_files(results))
    assert 3 <= landed < 150, "the signal landed mid-run"
    assert record["shards_done"] == landed, "the record counts exactly the shards that landed"
    assert len(_runs(results)) == 1, "the refused run wrote no run record"

    rerun = _run(args, tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{landed} already done" in rerun.stdout
    pairs = [r for f in _pairs_files(results) for r in pq.read_table(f, columns=["example_id"]).to_pylist()]
    assert len(pairs) == len({r["example_id"] for r in pairs}) == 150, "every example once"
    assert _runs(results)[-1]["status"] == "finished"


def test_sigterm_to_the_group_of_a_debug_cluster_run(tmp_path: Path) -> None:
    results = tmp_path / "results"
    with repo_results_lock():  # the debug executor writes its logs under the repository's results/slurm_logs
        proc = _start([*LONG, "cluster=debug", f"results_dir={results}"], tmp_path)
        try:
            _wait_for_pairs(proc, results, 3)
            rc, err, _ = _stop_group(proc)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    record = _assert_interrupted_cleanly(rc, err, results, proc.pid)
    assert record["shards_done"] == len(_pairs_files(results))


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    yield from small_disk(tmp_path, 160)


def test_full_disk_is_one_message_and_keeps_whole_shards(tmp_path: Path, disk: SmallDisk) -> None:
    results = disk.path / "results"
    proc = _run([*LONG, f"results_dir={results}"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "the disk is full" in proc.stderr and str(results) in proc.stderr and "Fix:" in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    landed = _pairs_files(results)
    assert 0 < len(landed) < 150, "the disk filled in the middle of the run"
    for f in landed:
        read_parquet_validated(f, PairRecord)
    assert not list(results.rglob(".*.tmp-*")), "no temporary file left to mistake for a result"


def test_read_only_and_file_results_dir(tmp_path: Path, disk: SmallDisk) -> None:
    results = disk.path / "results"
    done = _run([*SHORT, f"results_dir={results}"], tmp_path)
    assert done.returncode == 0, done.stderr
    (results / "report").mkdir(exist_ok=True)
    disk.read_only()
    again = _run([*SHORT, f"results_dir={results}"], tmp_path)
    assert again.returncode == 1 and "read-only" in again.stderr and "results_dir=" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr
    report = subprocess.run([sys.executable, "-m", "analysis.report", str(results), "--no-figures"], cwd=REPO_ROOT,
                            env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert report.returncode == 1 and "--out" in report.stderr and "Traceback" not in report.stderr, report.stderr
    elsewhere = subprocess.run([sys.executable, "-m", "analysis.report", str(results), "--no-figures", "--out",
                                str(tmp_path / "out")], cwd=REPO_ROOT, env=_env(tmp_path), capture_output=True,
                               text=True, timeout=300)
    assert elsewhere.returncode == 0, elsewhere.stderr  # the report reads without the lock
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    proc = _run([*SHORT, f"results_dir={a_file}"], tmp_path, timeout=300)
    assert proc.returncode == 1 and "is a file, not a directory" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
