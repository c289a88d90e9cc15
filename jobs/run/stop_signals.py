"""SIGTERM and SIGINT during a run: stop scheduling, keep what finished, and leave cleanly.

What Slurm sends on ``scancel`` and at the time limit (to the whole process group), what ``kill``
and Ctrl-C send: within :func:`catching` such a signal raises :class:`RunInterrupted` in the main
thread, except while a shard's files are being written (:meth:`StopSignals.deferred`), where it is
raised when the write is done, so a shard whose rows reached the driver lands whole. The driver
then marks its run record ``interrupted``, stops Ray and the entry point exits with 128 + signal;
a rerun resumes from the finished shards.

A handler's exception raised while Ray's C code waits comes out as a ``SystemError``: the scheduler
holds the signal around its blocking Ray calls (``Scheduler(shield=StopSignals.deferred)``) and the
driver unwraps one from anywhere else (:func:`wrapped_in`).

``ray.init`` installs its own SIGTERM handlers (a Python one that exits at once and a C++ one that
dumps a stack and aborts): call :meth:`StopSignals.install` again after it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RunInterrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt: no `except Exception` takes it
    """A stop signal arrived; finished shards are on disk and a rerun resumes."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopSignals:
    """The handlers of one run (see the module docstring)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._defer = 0
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """(Re)install the handlers; only the main thread can (elsewhere: nothing happens)."""
        if threading.current_thread() is not threading.main_thread():
            log.warning("not in the main thread: SIGTERM/SIGINT keep their default handling")
            return
        for sig in SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            log.warning("%s again: already stopping", signal.Signals(signum).name)
            return
        self.received = signum
        log.warning("%s received: stopping the run (finished shards are kept; rerun to resume)",
                    signal.Signals(signum).name)
        if not self._defer:
            raise RunInterrupted(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A stop signal arriving within the block takes effect when the block has finished."""
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
        if not self._defer and self.received is not None:
            raise RunInterrupted(self.received)

    @contextlib.contextmanager
    def closing(self) -> Iterator[None]:
        """The run is ending (its record being written, Ray stopping): a stop signal within the block is
        noted and logged, never raised, so it cannot cut the run record short. (Slurm requeueing a job
        sends SIGTERM a moment after the time limit's SIGUSR2 has begun the run's end.)"""
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1


@contextlib.contextmanager
def catching() -> Iterator[StopSignals]:
    """SIGTERM/SIGINT raise :class:`RunInterrupted` within the block; the old handlers return after."""
    stops = StopSignals()
    stops.install()
    try:
        yield stops
    finally:
        stops.restore()


_requeued_by: str | None = None


def note_requeue(name: str) -> None:
    """The Slurm job is being requeued: submitit's handler for ``name`` (the time limit's or a
    preemption's signal) checkpointed it and exits next with ``SystemExit``. The driver then records its
    run as ``interrupted`` by ``name``, not as failed."""
    global _requeued_by
    _requeued_by = name


def requeued_by() -> str | None:
    """The signal of :func:`note_requeue` in this process, if any."""
    return _requeued_by


def run_end(status: str, stop: str | None) -> tuple[str, str | None]:
    """The run record's (status, stop signal) as the run closes. A requeue submitit began names the end:
    the job then exits with ``SystemExit`` (seen as failed), or Slurm's SIGTERM, sent as it requeues the
    job, reaches the run before that exit does (seen as interrupted by SIGTERM: on a loaded machine the
    two race); either way the run was stopped by the requeue's signal."""
    if status in ("failed", "interrupted") and _requeued_by is not None:
        return "interrupted", _requeued_by
    return status, stop


def wrapped_in(exc: BaseException) -> RunInterrupted | None:
    """The :class:`RunInterrupted` behind ``exc``, if any: raised by the handler while a C extension was
    running (Ray's ``CoreWorker.wait`` runs signal handlers mid-call), it comes out as the cause of a
    ``SystemError`` ("returned a result with an exception set")."""
    seen: set[int] = set()
    inner: BaseException | None = exc
    while inner is not None and id(inner) not in seen:
        if isinstance(inner, RunInterrupted):
            return inner
        seen.add(id(inner))
        inner = inner.__cause__ or inner.__context__
    return None


def ending(exc: BaseException, kept: str = "finished shards are kept") -> tuple[str, int]:
    """The one line an entry point prints for a stop signal or a results-directory error, and its exit
    code; ``kept`` says what a rerun resumes from."""
    if isinstance(exc, RunInterrupted):
        return f"interrupted by {exc.name}: {kept}; run the same command again to resume", exc.exit_code
    return f"error: {exc}", 1
