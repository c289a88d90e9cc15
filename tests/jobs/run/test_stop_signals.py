"""SIGTERM/SIGINT handling in this process (real signals to ourselves): RunInterrupted at once, or
after a shard's write when it arrives during one; the previous handlers come back."""

from __future__ import annotations

import os
import signal
import time

import pytest

from jobs.run import stop_signals
from jobs.run.stop_signals import RunInterrupted, catching, wrapped_in


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_raises_run_interrupted(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(RunInterrupted) as caught, catching():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler runs before this returns
    assert caught.value.signum == sig and caught.value.exit_code == 128 + sig
    assert caught.value.name == sig.name
    assert signal.getsignal(sig) is before


def test_signal_during_a_write_waits_for_it() -> None:
    steps: list[str] = []
    with pytest.raises(RunInterrupted), catching() as stops:
        with stops.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            steps.append("shard written")  # the write is not cut off
        steps.append("after")  # never reached: the signal takes effect as the write ends
    assert steps == ["shard written"]
    assert stops.received == signal.SIGTERM


def test_a_signal_while_the_run_closes_is_noted_not_raised() -> None:
    """The run record and Ray's shutdown run inside ``closing()``: Slurm's SIGTERM after a requeue
    cannot cut them short, not even through a write's ``deferred()`` ending inside it."""
    steps: list[str] = []
    with catching() as stops, stops.closing():
        with stops.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            steps.append("record written")
        steps.append("ray stopped")
    assert steps == ["record written", "ray stopped"] and stops.received == signal.SIGTERM


def test_second_signal_while_stopping_is_ignored() -> None:
    with catching() as stops:
        with pytest.raises(RunInterrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        os.kill(os.getpid(), signal.SIGTERM)  # cleanup (stopping Ray) is not interrupted again
        time.sleep(0.05)
    assert stops.received == signal.SIGTERM


def test_wrapped_in_finds_the_stop_behind_a_c_extensions_system_error() -> None:
    """What CPython raises when a C function returns a value with the handler's exception set: a
    SystemError whose cause is that exception (Ray's CoreWorker.wait, outside the scheduler's shield)."""
    stop = RunInterrupted(signal.SIGTERM)
    try:
        try:
            raise stop
        except RunInterrupted as inner:
            raise SystemError("<cyfunction CoreWorker.wait> returned a result with an exception set") from inner
    except SystemError as exc:
        assert wrapped_in(exc) is stop
    try:
        raise SystemError("a C extension's own bug") from ValueError("unrelated")
    except SystemError as exc:
        assert wrapped_in(exc) is None
    looped = SystemError("cycle")
    looped.__context__ = ValueError("back")
    looped.__context__.__context__ = looped
    assert wrapped_in(looped) is None


@pytest.mark.parametrize(("status", "stop", "requeue", "expected"), [
    ("failed", None, "SIGUSR2", ("interrupted", "SIGUSR2")),  # submitit's SystemExit after the checkpoint
    ("interrupted", "SIGTERM", "SIGUSR2", ("interrupted", "SIGUSR2")),  # Slurm's requeue SIGTERM came first
    ("finished", None, "SIGUSR2", ("finished", None)),
    ("interrupted", "SIGTERM", None, ("interrupted", "SIGTERM")),  # a plain scancel: no requeue
    ("failed", None, None, ("failed", None)),
])
def test_a_requeue_names_the_runs_end_whichever_signal_arrived_first(
        monkeypatch: pytest.MonkeyPatch, status: str, stop: str | None, requeue: str | None,
        expected: tuple[str, str | None]) -> None:
    monkeypatch.setattr(stop_signals, "_requeued_by", requeue)
    assert stop_signals.run_end(status, stop) == expected
