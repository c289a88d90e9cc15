"""Readers against a compaction's removals: a reader never finds a file it listed gone.

A reader lists the files to read (the manifest's merged files plus the per-shard files of shards the
manifest does not list) and reads them later, lazily, through DuckDB views; a compaction in another
process may meanwhile write a new manifest and delete the per-shard files it merged. Readers therefore
hold ``<results_dir>/.streamgen.readers.lock`` *shared* (``flock(LOCK_SH)``) from before they read the
manifest until their connection is gone, and a compaction deletes files only while it holds that lock
*exclusively*, taken without waiting (:func:`removal_lock`): while any reader reads, a compaction merges
and writes its manifest as usual and leaves the per-shard files in place (readers skip them by the
manifest; the next compaction removes them). So no compaction waits for a reader, and no reader fails
with a file-not-found. The lock is not the run lock (``results_dir.LOCK_NAME``): a run holds that for
hours, and readers must read a directory a run is filling.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

READERS_LOCK = ".streamgen.readers.lock"


@dataclass
class ReadLock:
    """A shared hold on a results directory's readers lock (``fd`` None: not held, e.g. read-only)."""

    fd: int | None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def _open(root: Path) -> int | None:
    try:
        return os.open(root / READERS_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a read-only copy: nothing can compact it, so nothing to guard against
        return None


def read_shared(root: str | os.PathLike[str]) -> ReadLock:
    """Hold the readers lock shared (waiting while a compaction deletes files: seconds at most)."""
    fd = _open(Path(root))
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_SH)
    return ReadLock(fd)


@contextlib.contextmanager
def removal_lock(root: str | os.PathLike[str]) -> Iterator[bool]:
    """The readers lock exclusively if no reader holds it (True), else False at once: delete files only
    when True."""
    fd = _open(Path(root))
    if fd is None:
        yield True
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        yield False
        return
    try:
        yield True
    finally:
        os.close(fd)
