"""Preemption of a multi-node job: whichever of its tasks Slurm signals, rank 0 requeues the whole job.

Slurm sends SIGUSR2 to the tasks of the step before the time limit or on preemption, but a signal can
also reach one node's task alone (``kill -USR2`` on that node, a site's drain hook). submitit acts on
it only on rank 0 (checkpoint + ``scontrol requeue``); other ranks merely log it, so a signal to
another node alone would be lost and the job killed later with its shards half done. Hence:

- every other rank, on SIGUSR2, writes the ``preempt`` file of this run in the job's shared folder
  and keeps its Ray node up (the driver's running shards need it until the requeue stops the job);
- rank 0 watches for that file and signals itself, so submitit's own handler runs there;
- rank 0 acts on SIGUSR2 at most once per run: a direct signal plus the relayed one requeue once.

The requeued run skips every shard written before, so nothing is lost or duplicated.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

POLL_S = 1.0
Handler = Callable[[int, FrameType | None], Any]


@contextlib.contextmanager
def relay(is_head: bool, request_file: Path, poll_s: float = POLL_S) -> Iterator[None]:
    """Within the block: SIGUSR2 on any rank reaches rank 0's handler (submitit's), once.

    Does nothing where no Python handler is installed for SIGUSR2 (submitit's debug executor).
    """
    original = signal.getsignal(signal.SIGUSR2)
    if not callable(original):
        yield
        return
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(request_file, stop, poll_s), name="preempt-relay", daemon=True)
    if is_head:
        signal.signal(signal.SIGUSR2, _once(original))
        watcher.start()
    else:
        signal.signal(signal.SIGUSR2, _requesting(original, request_file))
    try:
        yield
    finally:
        stop.set()
        if watcher.is_alive():  # no relayed signal may reach the original handler after this
            watcher.join()
        signal.signal(signal.SIGUSR2, original)


def _once(handler: Handler) -> Handler:
    fired: list[bool] = []

    def handle(signum: int, frame: FrameType | None) -> Any:
        if fired:
            log.info("SIGUSR2 again: this run is already checkpointing and requeueing")
            return None
        fired.append(True)
        return handler(signum, frame)

    return handle


def _requesting(handler: Handler, request_file: Path) -> Handler:
    def handle(signum: int, frame: FrameType | None) -> Any:
        handler(signum, frame)  # submitit logs "this job is preempted" and returns on ranks > 0
        if not request_file.exists():
            request_file.write_text(f"{socket.gethostname()} {os.getpid()}\n")
            log.warning("SIGUSR2 on this node: asked rank 0 to requeue the whole job (%s)", request_file)

    return handle


def _watch(request_file: Path, stop: threading.Event, poll_s: float) -> None:
    while not stop.wait(poll_s):
        if request_file.exists():
            log.warning("another node was signalled (%s): requeueing the whole job",
                        request_file.read_text().strip())
            os.kill(os.getpid(), signal.SIGUSR2)
            return
