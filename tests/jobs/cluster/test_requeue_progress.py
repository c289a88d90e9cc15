"""A time-out requeue that finished work does not count against ``max_requeues`` (jobs/cluster/executors.py,
``RayJob.checkpoint``): submitit lowers the countdown it hands the resubmitted job by one per time-out;
an attempt whose results directory grew gets that one back, never above ``max_requeues``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jobs.cluster.executors import GridTask, RayJob
from jobs.run import stop_signals
from streamgen.config import GridConfig, RayConfig


@dataclass
class _Task:
    done: list[int] = field(default_factory=list)

    def progress(self) -> int:
        return len(self.done)

    def __call__(self, address: str) -> None:
        return None


def _time_out(job: RayJob, countdown: int, task: _Task, finished: int, timed_out: bool = True) -> int:
    """One attempt that finishes ``finished`` units and times out (or is preempted): the countdown
    submitit then sets."""
    job._progress_at_start = task.progress()  # what __call__ records at the attempt's start
    task.done += [1] * finished
    requeue = job.checkpoint()
    requeue.set_timeout(480, countdown - timed_out)  # submitit: countdown - timed_out
    return requeue._timeout_countdown


def test_a_time_out_that_finished_work_is_refunded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stop_signals, "_requeued_by", None)  # checkpoint notes the requeue: undone after
    task, max_requeues = _Task(), 3
    job = RayJob(task, RayConfig(), 1, tmp_path, max_requeues)
    countdown = max_requeues
    assert _time_out(job, countdown, task, finished=1, timed_out=False) == max_requeues  # a preemption: never above
    for _ in range(10):  # ten attempts that each finish a unit: the countdown never falls
        countdown = _time_out(job, countdown, task, finished=1)
        assert countdown == max_requeues
    for left in range(max_requeues - 1, -1, -1):  # attempts that finish nothing count, one each
        countdown = _time_out(job, countdown, task, finished=0)
        assert countdown == left
    assert _time_out(job, countdown, task, finished=0) == -1  # submitit stops here: timed out too many times


def test_a_grid_tasks_progress_is_its_results_directory(tmp_path: Path) -> None:
    task = GridTask(GridConfig(results_dir=str(tmp_path)))
    before = task.progress()
    (tmp_path / "pairs").mkdir()
    (tmp_path / "pairs" / "a.parquet").write_bytes(b"x" * 10)
    assert task.progress() == (before[0] + 1, before[1] + 10)


def test_the_requeue_survives_submitits_own_dump_and_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The resubmitted job is written and read back by submitit itself, as a requeue on Slurm does
    (a subclass of another name passed the countdown tests above and failed every real requeue)."""
    from submitit.core import job_environment, utils

    monkeypatch.setattr(stop_signals, "_requeued_by", None)
    task = _Task()
    job = RayJob(task, RayConfig(), 1, tmp_path, 3)
    job._progress_at_start = task.progress()
    task.done.append(1)
    delayed = utils.DelayedSubmission(job)
    delayed.set_timeout(480, 3)
    pickle = tmp_path / "submitted.pkl"
    assert job_environment._checkpoint(delayed, pickle, 2) == ""  # "" = requeued (a time-out: 3 - 1)
    loaded = utils.DelayedSubmission.load(pickle)
    assert loaded._timeout_countdown == 3  # the attempt finished work: its time-out was refunded
    assert isinstance(loaded.function, RayJob) and loaded.function.attempt == 1
