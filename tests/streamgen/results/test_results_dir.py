"""The results directory: one run at a time (a real OS lock held by a real second process, released
when that process is SIGKILLed), the writable check, and named I/O errors on a real full or read-only
tmpfs (skipped where mounting is not allowed)."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.run.writer import ResultWriter
from streamgen.config import REPO_ROOT
from streamgen.results.results_dir import (
    LOCK_NAME,
    ResultsDirError,
    ResultsDirLocked,
    acquire,
    check_writable,
    describe_os_error,
    hold,
)
from tests.jobs.run.test_writer import _pair, _shard, _step
from tests.support.fs_support import SmallDisk, small_disk

HOLDER = """
import sys, time
sys.path.insert(0, sys.argv[2])
from streamgen.results.results_dir import acquire
lock = acquire(sys.argv[1], "run-of-the-other")
print("locked", flush=True)
time.sleep(600)
"""


@pytest.fixture
def other_holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``tmp_path``'s lock."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), str(REPO_ROOT)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_second_run_refused_naming_the_holder(tmp_path: Path, other_holder: subprocess.Popen[str]) -> None:
    start = time.monotonic()
    with pytest.raises(ResultsDirLocked) as caught:
        acquire(tmp_path, "run-b")
    assert time.monotonic() - start < 2, "refused at once, not after waiting"
    message = str(caught.value)
    for part in ("run-of-the-other", f"pid {other_holder.pid}", f"host {socket.gethostname()}", "started 20",
                 f"kill -TERM {other_holder.pid}", "results_dir=", "--dry-run"):
        assert part in message, (part, message)


def test_lock_released_when_holder_is_sigkilled(tmp_path: Path, other_holder: subprocess.Popen[str]) -> None:
    with pytest.raises(ResultsDirLocked):
        acquire(tmp_path, "run-b")
    os.kill(other_holder.pid, signal.SIGKILL)
    other_holder.wait()
    lock = acquire(tmp_path, "run-b")  # nothing stale to clean up by hand
    assert lock.held and lock.holder.pid == os.getpid()
    assert '"run_id": "run-b"' in (tmp_path / LOCK_NAME).read_text()
    lock.release()


def test_lock_released_after_the_block(tmp_path: Path) -> None:
    with hold(tmp_path, "a") as lock:
        assert lock.held
        with pytest.raises(ResultsDirLocked):  # a second open file of this very process conflicts too
            acquire(tmp_path, "b")
    assert not lock.held
    acquire(tmp_path, "b").release()


def test_temp_cleanup_only_under_the_lock(tmp_path: Path) -> None:
    stale = tmp_path / "pairs" / ".x.parquet.tmp-0123abcd"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"in flight")
    writer = ResultWriter(tmp_path)
    other = tmp_path / "elsewhere"
    with hold(other, "r") as foreign, pytest.raises(RuntimeError, match="needs the lock"):
        writer.remove_stale_temp_files(foreign)
    assert stale.exists()
    with hold(tmp_path, "r") as lock:
        assert writer.remove_stale_temp_files(lock) == 1
    assert not stale.exists()


def test_results_dir_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "results"
    path.write_text("not a directory")
    with pytest.raises(ResultsDirError, match=r"is a file, not a directory.*Fix: move that file away"):
        check_writable(path)
    with pytest.raises(ResultsDirError, match=r"a file is in the way.*Fix"):
        check_writable(path / "below")  # NotADirectoryError
    assert path.read_text() == "not a directory"


def test_the_check_before_a_slurm_submission_writes_nothing(tmp_path: Path) -> None:
    """``create=False`` (jobs.cluster.executors.submit_grid): a missing results_dir is checked through its parent
    and not created, so a cluster that then refuses the job leaves nothing behind; a file in the way and
    a parent this process cannot write are still refused."""
    assert check_writable(tmp_path / "a" / "b", create=False) == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()
    (tmp_path / "f").write_text("x")
    with pytest.raises(ResultsDirError, match="not a writable directory.*Fix: set results_dir="):
        check_writable(tmp_path / "f" / "below", create=False)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root may write anywhere
        with pytest.raises(ResultsDirError, match="not a writable directory"):
            check_writable(locked / "r", create=False)


def test_pyarrow_style_error_is_named() -> None:
    # pyarrow's OSError carries the errno only in its message
    text = describe_os_error(OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space"),
                             "/r/pairs/x.parquet")
    assert "/r/pairs/x.parquet" in text and "the disk is full" in text and "rerun" in text
    text = describe_os_error(OSError(errno.EROFS, "Read-only file system", "/r/runs"))
    assert "/r/runs" in text and "read-only" in text and "results_dir=" in text


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    yield from small_disk(tmp_path, 256)


def test_read_only_results_dir(disk: SmallDisk) -> None:
    (disk.path / "results").mkdir()
    disk.read_only()
    with pytest.raises(ResultsDirError, match=r"results.*the file system is read-only.*Fix: set results_dir="):
        check_writable(disk.path / "results")
    with pytest.raises(ResultsDirError, match="read-only"):
        acquire(disk.path / "results", "r")


def test_full_disk_writes_no_partial_shard(disk: SmallDisk) -> None:
    shard, writer = _shard(), ResultWriter(disk.path / "results")
    pairs = [_pair(shard, e) for e in shard.example_ids]
    steps = [_step(shard, e, i) for e in shard.example_ids for i in (1, 2)]
    writer.write_shard(shard, pairs, steps)  # room for one shard
    assert writer.is_done(shard)
    paths = writer.paths(shard)
    paths.pairs.unlink()
    paths.steps.unlink()
    disk.fill()
    with pytest.raises(ResultsDirError) as caught:
        writer.write_shard(shard, pairs, steps)
    message = str(caught.value)
    assert "the disk is full" in message and str(disk.path / "results") in message and "rerun" in message
    assert not writer.paths(shard).pairs.exists(), "no completion marker for a shard that did not land"
    assert not list(disk.path.rglob("*.tmp-*")), "the atomic write left a temporary file"
    assert not writer.is_done(shard)
