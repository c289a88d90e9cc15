"""Local Ray on a loaded machine (jobs/run/local_ray.py): Ray gives a new node's raylet a fixed 30 s to register
and raises a bare ``Exception`` past it. start_ray kills what the failed attempt left running, tries again up to
``START_ATTEMPTS`` times, and then stops with one message naming the fix; the workflow prints that line, no
traceback. ``ray.init`` is replaced by a designed stand-in, so each attempt's outcome is chosen by the test."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.run import local_ray
from jobs.run.local_ray import RayStartError, start_ray
from streamgen.config import RayConfig

TIMEOUT = Exception("The current node timed out during startup. This could happen because some of the raylet "
                    "failed to startup or the GCS has become overloaded.")


class FakeInit:
    """ray.init that fails with Ray's start-up timeout ``fails`` times, then succeeds; each failing attempt
    first starts a child process, as Ray's GCS and raylet would be, and leaves it running."""

    def __init__(self, fails: int, error: Exception = TIMEOUT) -> None:
        self.fails, self.error, self.calls = fails, error, 0
        self.children: list[subprocess.Popen[bytes]] = []

    def __call__(self, **kwargs: object) -> None:
        self.calls += 1
        if self.calls <= self.fails:
            self.children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]))
            raise self.error


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    import ray

    def install(fails: int, error: Exception = TIMEOUT) -> FakeInit:
        fake = FakeInit(fails, error)
        monkeypatch.setattr(ray, "init", fake)
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        monkeypatch.setattr(ray, "shutdown", lambda: None)
        monkeypatch.setattr(local_ray, "put_checkout_on_worker_path", lambda: None)
        return fake

    yield install


def _dead(proc: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.poll() is not None


def test_a_start_timeout_is_tried_again_and_the_half_started_processes_are_killed(fake_ray, caplog) -> None:  # type: ignore[no-untyped-def]
    fake = fake_ray(fails=local_ray.START_ATTEMPTS - 1)
    session = start_ray(RayConfig(), default_num_cpus=2)
    assert session.owned
    assert fake.calls == local_ray.START_ATTEMPTS  # every failure but the last attempt, then the success
    assert all(_dead(p) for p in fake.children)  # nothing of the failed attempts keeps running
    retries = [r.getMessage() for r in caplog.records if "starting it again" in r.getMessage()]
    assert len(retries) == local_ray.START_ATTEMPTS - 1
    assert f"attempt 2 of {local_ray.START_ATTEMPTS}" in retries[0]


def test_after_the_last_attempt_one_error_names_the_fix(fake_ray) -> None:  # type: ignore[no-untyped-def]
    fake = fake_ray(fails=99)
    with pytest.raises(RayStartError) as err:
        start_ray(RayConfig(), default_num_cpus=2)
    assert fake.calls == local_ray.START_ATTEMPTS
    assert all(_dead(p) for p in fake.children)
    text = str(err.value)
    assert f"{local_ray.START_ATTEMPTS} times" in text and "load average" in text
    assert "workers=1 score_workers=1" in text and "finished shards are kept" in text
    assert err.value.__cause__ is None and err.value.__suppress_context__  # one message, not a chain


def test_any_other_failure_is_raised_at_once_and_not_retried(fake_ray) -> None:  # type: ignore[no-untyped-def]
    other = RuntimeError("object_store_memory is larger than the machine's memory")
    fake = fake_ray(fails=99, error=other)
    with pytest.raises(RuntimeError) as err:
        start_ray(RayConfig(), default_num_cpus=2)
    assert err.value is other and fake.calls == 1
    for p in fake.children:
        p.kill()


def test_only_the_attempts_own_processes_are_killed(fake_ray) -> None:  # type: ignore[no-untyped-def]
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # started before
    try:
        fake = fake_ray(fails=1)
        start_ray(RayConfig(), default_num_cpus=2)
        assert _dead(fake.children[0])
        assert bystander.poll() is None
    finally:
        bystander.kill()


def test_the_grid_ends_in_one_line_when_ray_cannot_start(fake_ray, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from workflows.full_grid import main

    fake_ray(fails=99)
    rc = main(["grid=scripted", "limit=1", "benchmarks=[coedit]", f"results_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("aborted: local Ray did not start") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
