"""The results directory of a run: one run at a time (an OS file lock), checked writable up front,
and every I/O failure turned into one message naming the path, the cause and the fix.

The lock is ``<results_dir>/.streamgen.lock``, held with ``flock(LOCK_EX | LOCK_NB)`` for the whole
run. The kernel releases it when the holder's file is closed, which happens however the process ends
(SIGKILL and out-of-memory kills included), so a lock is never left stale. The file also records who
holds it (host, pid, run id, start time), for the message a second run gets. Readers (``--dry-run``,
``python -m analysis.report``) never take it. On NFS, Linux maps ``flock`` to POSIX byte-range locks,
which the NFS lock manager keeps across hosts.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import logging
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_NAME = ".streamgen.lock"

# errno → (cause, fix); the fix is completed with the path by :func:`describe_os_error`
_CAUSES: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("the disk is full (no space left on device)",
                   "free space on that file system (or set results_dir= to one with room), then rerun the "
                   "same command: finished shards are kept and the rest is computed"),
    errno.EDQUOT: ("the disk quota is exceeded",
                   "free space within your quota (or set results_dir= elsewhere), then rerun to resume"),
    errno.EROFS: ("the file system is read-only",
                  "set results_dir= to a writable directory (or remount it read-write); to only read the "
                  "results use `python -m analysis.report DIR` with a writable --out, or --dry-run"),
    errno.EACCES: ("permission denied",
                   "make it writable for this user (chmod/chown) or set results_dir= to a directory you own"),
    errno.EPERM: ("the operation is not permitted",
                  "make it writable for this user or set results_dir= to a directory you own"),
    errno.ENOTDIR: ("a file is in the way where a directory is needed",
                    "move that file away or set results_dir= to a directory"),
    errno.EEXIST: ("a file is in the way where a directory is needed",
                   "move that file away or set results_dir= to a directory"),
}


class ResultsDirError(RuntimeError):
    """The results directory cannot be used (not writable, full, a file, in use); the message names
    the path, the cause and the fix. Nothing half-written is left that a rerun would trust."""


class ResultsDirLocked(ResultsDirError):
    """Another live run holds the results directory's lock."""


def os_errno(exc: OSError) -> int | None:
    """The errno of ``exc``; pyarrow's ``OSError`` carries it only in its message (``[Errno 28] ...``)."""
    if exc.errno is not None:
        return int(exc.errno)
    if isinstance(exc, NotADirectoryError):
        return errno.ENOTDIR
    found = re.search(r"\[Errno (\d+)\]", str(exc)) or re.search(r"errno[= ](\d+)", str(exc))
    return int(found.group(1)) if found else None


def describe_os_error(exc: OSError, path: str | os.PathLike[str] | None = None, doing: str = "writing") -> str:
    """One line: what failed on which path, why, and what to do."""
    where = exc.filename or path
    code = os_errno(exc)
    cause, fix = _CAUSES.get(code or -1, (exc.strerror or str(exc), "check the path and rerun"))
    return f"{doing} {where}: {cause} ({type(exc).__name__}: {exc.strerror or exc}). Fix: {fix}"


def results_error(exc: OSError, path: str | os.PathLike[str] | None = None,
                  doing: str = "writing") -> ResultsDirError:
    return ResultsDirError(describe_os_error(exc, path, doing))


@contextlib.contextmanager
def named_io_errors(path: str | os.PathLike[str], doing: str = "writing") -> Iterator[None]:
    """Within the block an ``OSError`` becomes a :class:`ResultsDirError` naming ``path`` (when the
    error names no file itself), its cause and the fix."""
    try:
        yield
    except ResultsDirError:
        raise
    except OSError as exc:
        raise results_error(exc, path, doing) from exc


def check_writable(root: str | os.PathLike[str], *, create: bool = True) -> Path:
    """Create ``root`` if needed and prove a file can be created in it; raises ResultsDirError.
    ``create=False`` (before a Slurm job is queued, when nothing may be written yet): a missing ``root``
    only needs its nearest existing parent to be a directory this process may write into."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ResultsDirError(f"results_dir {root} is a file, not a directory. Fix: move that file away or "
                              f"set results_dir= to a directory")
    if not create and not root.exists():
        parent = next(p for p in root.absolute().parents if p.exists())
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise ResultsDirError(f"results_dir {root} cannot be created: {parent} is not a writable directory. "
                                  "Fix: set results_dir= to a directory you can write")
        return root
    with named_io_errors(root, "creating the results directory"):
        root.mkdir(parents=True, exist_ok=True)
    probe = root / f".streamgen-write-test-{os.getpid()}"
    with named_io_errors(root, "writing into the results directory"):
        try:
            probe.write_bytes(b"ok")
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()
    return root


@dataclass(frozen=True)
class Holder:
    """Who holds a results directory's lock."""

    host: str
    pid: int
    run_id: str
    started_at: str

    def describe(self) -> str:
        return f"run {self.run_id} (pid {self.pid} on host {self.host}, started {self.started_at})"


@dataclass
class ResultsLock:
    """A held lock on one results directory (see the module docstring); ``release`` or leave the
    :func:`hold` block to free it."""

    root: Path
    holder: Holder
    fd: int | None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def read_holder(root: str | os.PathLike[str]) -> Holder | None:
    """What the lock file says about its last holder (``None`` if there is none or it is unreadable)."""
    try:
        data = json.loads((Path(root) / LOCK_NAME).read_text())
        return Holder(str(data["host"]), int(data["pid"]), str(data["run_id"]), str(data["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def acquire(root: str | os.PathLike[str], run_id: str) -> ResultsLock:
    """Take the results directory's lock at once or raise :class:`ResultsDirLocked` naming its holder."""
    root = check_writable(root)
    path = root / LOCK_NAME
    with named_io_errors(path, "opening the lock file"):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (PEP 446)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ResultsDirLocked(_locked_message(root)) from None
    except OSError as exc:
        os.close(fd)
        raise results_error(exc, path, "locking") from exc
    holder = Holder(socket.gethostname(), os.getpid(), run_id,
                    dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder.__dict__) + "\n").encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise results_error(exc, path, "writing the lock file") from exc
    return ResultsLock(root, holder, fd)


def _locked_message(root: Path) -> str:
    holder = read_holder(root)
    who = holder.describe() if holder else "another run (its lock file names no holder yet)"
    stop = f"stop it (`kill -TERM {holder.pid}` on {holder.host}), " if holder else ""
    return (f"results_dir {root} is in use by {who}: one run per results directory. Fix: wait for it "
            f"to finish, {stop}or set results_dir= to another directory. `--dry-run` and "
            f"`python -m analysis.report {root}` read it without waiting.")


@contextlib.contextmanager
def hold(root: str | os.PathLike[str], run_id: str) -> Iterator[ResultsLock]:
    """The results directory's lock for the duration of the block."""
    lock = acquire(root, run_id)
    log.info("holding %s for run %s", lock.root / LOCK_NAME, run_id)
    try:
        yield lock
    finally:
        lock.release()
