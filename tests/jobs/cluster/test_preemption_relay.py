"""jobs.cluster.preemption_relay with real SIGUSR2 signals in this process (no cluster): a stand-in for submitit's
handler records each call, as submitit's would checkpoint and requeue."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.cluster import preemption_relay


@pytest.fixture
def submitit_handler() -> Iterator[list[int]]:
    calls: list[int] = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    yield calls
    signal.signal(signal.SIGUSR2, previous)


def _wait_until(condition, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_signal_to_another_rank_asks_rank_0_and_keeps_running(tmp_path: Path, submitit_handler: list[int]) -> None:
    request = tmp_path / "1_r0_preempt"
    with preemption_relay.relay(is_head=False, request_file=request):
        os.kill(os.getpid(), signal.SIGUSR2)
        _wait_until(request.exists)
        assert submitit_handler == [signal.SIGUSR2]  # submitit still logs it (and, on rank > 0, returns)
        assert str(os.getpid()) in request.read_text()
    os.kill(os.getpid(), signal.SIGUSR2)  # the block is left: the original handler is back
    _wait_until(lambda: len(submitit_handler) == 2)


def test_rank_0_acts_on_the_relayed_request_and_on_a_direct_signal_only_once(
        tmp_path: Path, submitit_handler: list[int]) -> None:
    request = tmp_path / "1_r0_preempt"
    with preemption_relay.relay(is_head=True, request_file=request, poll_s=0.05):
        time.sleep(0.2)
        assert submitit_handler == []  # no request file, no signal: nothing happens
        request.write_text("nodeB 123\n")  # what another rank writes
        _wait_until(lambda: submitit_handler == [signal.SIGUSR2])
        os.kill(os.getpid(), signal.SIGUSR2)  # Slurm's own signal to every task arrives as well
        time.sleep(0.3)
        assert submitit_handler == [signal.SIGUSR2]  # checkpoint + requeue ran once
    assert signal.getsignal(signal.SIGUSR2) is not None and not any(
        t.name == "preempt-relay" for t in threading.enumerate())  # the watcher ended with the block
    os.kill(os.getpid(), signal.SIGUSR2)  # and submitit's handler is back
    _wait_until(lambda: len(submitit_handler) == 2)


def test_without_a_python_handler_nothing_is_installed(tmp_path: Path) -> None:
    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        with preemption_relay.relay(is_head=True, request_file=tmp_path / "x"):
            assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR2, previous)
