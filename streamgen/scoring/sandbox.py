"""Run one untrusted program in a sandbox and return a typed verdict (see docs/sandbox.md).

`execute(program, timeout_s=...)` writes the program to a fresh temporary directory and runs it with
`python -I` behind one of three isolation backends, chosen once per process by probing. The two
isolating ones show the program the same allow-list view of the host (``_view.py``: ``/usr``, the
interpreter's own directories read-only, a few synthetic ``/etc`` files, a minimal ``/dev``, its
own ``/proc``, an empty private ``/tmp`` holding the work dir, nothing else; ``view`` in results):

- ``bwrap``: bubblewrap with every namespace unshared (net, pid, ipc, uts, user, mount) building
  the view from an empty root;
- ``unshare``: util-linux ``unshare`` (user, net, pid, ipc, uts, mount namespaces) plus a shell step
  that builds the view on a tmpfs, ``pivot_root`` s into it, detaches the host's tree and drops all
  capabilities with ``setpriv`` -- the fallback for clusters without bubblewrap;
- ``rlimit-only``: resource limits and a process group only; NO network or filesystem isolation
  (warned loudly, recorded as ``network_isolated=False`` and ``view="host"``).

Every backend applies rlimits through ``prlimit`` (CPU, address space, file size, core=0, processes),
a scrubbed environment, capped output and a kill of the whole process group, and where this process
may write the cgroup tree (root), a per-run pids (+ memory) cgroup that caps the process count for
real and lets every descendant be killed, including ones that called ``setsid``.
"""

from __future__ import annotations

import logging
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from streamgen.scoring import _isolation as iso
from streamgen.scoring._isolation import BACKENDS, Backend, CgroupSlot, Limits
from streamgen.scoring._view import INNER_DIR, VIEW_VERSION, View, ViewError, interpreter_view

logger = logging.getLogger(__name__)

Status = Literal["passed", "failed", "timeout", "error"]
_GRACE_AFTER_EXIT_S = 0.2
_KILL_OUTPUT_FACTOR = 64

__all__ = ["BACKENDS", "VIEW_VERSION", "Backend", "ExecutionResult", "SandboxError", "available_backends",
           "execute", "select_backend", "view_name"]


class SandboxError(RuntimeError):
    """Raised for a misuse of the sandbox API (not for a program's failure)."""


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of one sandboxed run.

    status: ``passed`` (exit 0), ``failed`` (non-zero exit, exception, killed by a memory or file
    limit or signal, output flood), ``timeout`` (wall or CPU limit), ``error`` (the sandbox itself
    could not run the program; retry it, never count it as a verdict).
    """

    status: Status
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    backend: Backend
    network_isolated: bool
    cpu_s: float | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    detail: str = ""
    processes_capped: bool = False
    attempts: int = 1
    view: str = ""  # what the program saw: the allow-list view's version, or "host" (rlimit-only)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated


@dataclass
class _Capture:
    cap: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @property
    def truncated(self) -> bool:
        return self.total > self.cap


@lru_cache(maxsize=1)
def available_backends() -> tuple[Backend, ...]:
    """Backends that work on this machine, strongest first (probed once per process)."""
    found = tuple(b for b in BACKENDS if iso.probe(b))
    if "bwrap" not in found:
        logger.warning("bubblewrap (bwrap) is not usable here; install the Debian package 'bubblewrap'")
    if found[:1] == ("rlimit-only",):
        logger.warning("SANDBOX HAS NO NETWORK ISOLATION: neither bwrap nor unshare works here; "
                       "programs run with rlimits only and results say network_isolated=False")
    if not found:
        logger.error("no sandbox backend works here (need util-linux prlimit and setpriv)")
    return found


def select_backend(backend: Backend | None = None) -> Backend:
    """The backend to use: `backend` if given and usable, else the strongest usable one."""
    usable = available_backends()
    if backend is not None:
        if backend not in BACKENDS:
            raise SandboxError(f"unknown sandbox backend {backend!r}; choose one of {BACKENDS}")
        if backend not in usable:
            raise SandboxError(f"sandbox backend {backend!r} does not work here (usable: {usable})")
        return backend
    if not usable:
        raise SandboxError("no sandbox backend works here: install bubblewrap (Debian 'bubblewrap') "
                           "or util-linux (unshare, setpriv, prlimit)")
    return usable[0]


def execute(program: str, *, timeout_s: float, python: str | None = None,
            backend: Backend | None = None, memory_bytes: int = 2 << 30,
            file_size_bytes: int = 64 << 20, max_processes: int = 64, cpu_s: float | None = None,
            max_output_bytes: int = 64 << 10, files: Mapping[str, str] | None = None,
            stdin: str | None = None, work_root: str | None = None) -> ExecutionResult:
    """Run `program` (Python source) with `python -I` in a sandbox; never raises for program faults.

    `python` defaults to this interpreter; wherever it is installed, its directories join the
    program's read-only view (resolved once per interpreter). `files` are extra files written next to the program. `cpu_s` defaults
    to `timeout_s`. Output beyond `max_output_bytes` per stream is dropped (flagged truncated); past
    64 times that the program is killed and fails. `work_root` is where the per-run work dir is
    made (default: the system temp dir; on clusters, node-local scratch).
    """
    if timeout_s <= 0:
        raise SandboxError(f"timeout_s must be positive, got {timeout_s}")
    chosen = select_backend(backend)
    limits = Limits(cpu_s=math.ceil(cpu_s if cpu_s is not None else timeout_s),
                    memory_bytes=memory_bytes, file_size_bytes=file_size_bytes,
                    max_processes=max_processes)
    interpreter = shutil.which(python or sys.executable)
    if interpreter is None:
        return _error(chosen, f"Python interpreter not found or not executable: {python}")
    try:
        view = _view_for(chosen, os.path.abspath(interpreter))
    except ViewError as exc:
        return _error(chosen, f"sandbox setup failed before the program started: {exc}")
    try:
        dirs = iso.RunDirs.create(work_root)
    except OSError as exc:
        return _error(chosen, f"could not create the temporary work dir: {exc}")
    try:
        _write_files(dirs.work, program, files or {})
        return _run(chosen, view, dirs, limits, timeout_s, max_output_bytes, stdin)
    except OSError as exc:
        logger.exception("sandbox failed to run a program")
        return _error(chosen, f"sandbox failure: {type(exc).__name__}: {exc}")
    finally:
        _remove_tree(dirs.base)


def _view_for(backend: Backend, interpreter: str) -> View:
    """The interpreter's allow-list view; the rlimit-only fallback has none (the host as it is)."""
    if backend == "rlimit-only":
        return View(interpreter, (), ())
    return interpreter_view(interpreter)


def _write_files(workdir: str, program: str, files: Mapping[str, str]) -> None:
    for name, text in {**files, iso.PROGRAM_NAME: program}.items():
        path = os.path.normpath(os.path.join(workdir, name))
        if not path.startswith(workdir + os.sep):
            raise SandboxError(f"file name escapes the work dir: {name!r}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)


def _remove_tree(path: str) -> None:
    def _retry_writable(func, target, _exc_info):  # programs may chmod their files to 000
        os.chmod(os.path.dirname(target), 0o700)
        if os.path.isdir(target):
            os.chmod(target, 0o700)
        func(target)

    try:
        shutil.rmtree(path, onerror=_retry_writable)
    except OSError:
        logger.warning("could not remove sandbox work dir %s", path, exc_info=True)


def _error(backend: Backend, detail: str) -> ExecutionResult:
    return ExecutionResult(status="error", returncode=None, stdout="", stderr="", wall_s=0.0,
                           backend=backend, network_isolated=backend != "rlimit-only", detail=detail,
                           view=view_name(backend))


def view_name(backend: Backend) -> str:
    """What a program run by `backend` sees: the allow-list view's version, or ``host``."""
    return "host" if backend == "rlimit-only" else VIEW_VERSION


class _Child:
    """The sandbox's direct child: reaped with wait4 so its CPU time (and reaped descendants') is
    known; `started` turns true when the program's interpreter wrote the start marker."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.returncode: int | None = None
        self.cpu_s: float | None = None
        self.started = False

    def poll(self, block: bool = False) -> bool:
        if self.returncode is None:
            pid, status, usage = os.wait4(self.proc.pid, 0 if block else os.WNOHANG)
            if pid == 0:
                return False
            self.returncode = os.waitstatus_to_exitcode(status)
            self.proc.returncode = self.returncode  # keeps Popen from waiting on a reaped pid
            self.cpu_s = usage.ru_utime + usage.ru_stime
        return True


def _run(backend: Backend, view: View, dirs: iso.RunDirs, limits: Limits, timeout_s: float,
         max_output: int, stdin: str | None) -> ExecutionResult:
    slot = CgroupSlot.create(limits, backend)
    home = dirs.work if backend == "rlimit-only" else INNER_DIR
    marker_r, marker_w = os.pipe()
    out, err = _Capture(max_output), _Capture(max_output)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(iso.command(backend, view, dirs, limits, slot, marker_w),
                                cwd=dirs.work, env=iso.scrubbed_env(view.executable, home),
                                start_new_session=True,
                                close_fds=True, pass_fds=(marker_w,),
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError:
        os.close(marker_r)
        if slot is not None:
            slot.remove()
        raise
    finally:
        os.close(marker_w)
    child = _Child(proc)
    try:
        ending = _pump(child, out, err, start + timeout_s, max_output * _KILL_OUTPUT_FACTOR, stdin,
                       marker_r)
    finally:
        _kill_all(proc, slot)
        child.poll(block=True)
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream is not None:
                stream.close()
        child.started = child.started or _marker_written(marker_r)
        if slot is not None:
            child.cpu_s = slot.cpu_s() if slot.cpu_s() is not None else child.cpu_s
            slot.remove()
    status, detail = _classify(backend, child, ending, err, limits, slot)
    return ExecutionResult(
        status=status, returncode=child.returncode, stdout=out.text(), stderr=err.text(),
        wall_s=time.monotonic() - start, backend=backend, network_isolated=backend != "rlimit-only",
        cpu_s=child.cpu_s, stdout_truncated=out.truncated, stderr_truncated=err.truncated,
        detail=detail, processes_capped=slot is not None or os.geteuid() != 0, view=view_name(backend))


def _pump(child: _Child, out: _Capture, err: _Capture, deadline: float, flood: int,
          stdin: str | None, marker_fd: int) -> str:
    """Read both pipes until the program exits ("exited"), the deadline passes ("wall") or the
    output floods ("flood"). A detached descendant holding the pipes open does not hold us up."""
    assert child.proc.stdout is not None and child.proc.stderr is not None  # both are PIPE
    if stdin is not None:
        _feed_stdin(child.proc, stdin)
    sel = selectors.DefaultSelector()
    for stream, cap in ((child.proc.stdout, out), (child.proc.stderr, err)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, cap)
    sel.register(marker_fd, selectors.EVENT_READ, "marker")
    exit_fd = os.pidfd_open(child.proc.pid)  # readable once the child exits: wakes the select
    sel.register(exit_fd, selectors.EVENT_READ, "exit")
    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                return "wall"
            if out.total + err.total > flood:
                return "flood"
            if exited_at is None and child.poll():
                exited_at = now
                sel.unregister(exit_fd)
            if exited_at is not None and (len(sel.get_map()) == 0 or now - exited_at > _GRACE_AFTER_EXIT_S):
                return "exited"
            for key, _ in sel.select(timeout=min(0.05, deadline - now)):
                if key.data == "exit":
                    continue  # reaped at the top of the loop
                chunk = os.read(key.fd, 1 << 16)
                if key.data == "marker":
                    child.started = child.started or chunk == b"1"
                    sel.unregister(key.fd)
                elif chunk:
                    key.data.add(chunk)
                else:
                    sel.unregister(key.fileobj)
    finally:
        sel.close()
        os.close(exit_fd)


def _marker_written(fd: int) -> bool:
    """Whether the start marker sits unread in its pipe (the loop ended before reading it); closes fd."""
    try:
        os.set_blocking(fd, False)
        return os.read(fd, 1) == b"1"
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _feed_stdin(proc: subprocess.Popen, text: str) -> None:
    assert proc.stdin is not None  # PIPE whenever there is input
    try:
        proc.stdin.write(text.encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the program did not read its input; that is its business


def _kill_all(proc: subprocess.Popen, slot: CgroupSlot | None) -> None:
    """SIGKILL the process group and every process in the run's cgroup (setsid escapees too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone
    if slot is not None:
        slot.kill_all()


def _classify(backend: Backend, child: _Child, ending: str, err: _Capture, limits: Limits,
              slot: CgroupSlot | None) -> tuple[Status, str]:
    rc, cpu = child.returncode, child.cpu_s
    if not child.started:  # the program's own code never ran: the sandbox or interpreter failed
        if ending == "wall":
            return "error", "the program had not started when the time limit passed (sandbox hung)"
        first = (err.text().strip().splitlines() or [f"exit code {rc}, no output"])[0][:300]
        return "error", f"sandbox setup failed before the program started: {first}"
    if ending == "wall":
        return "timeout", "wall-clock limit reached; process tree killed"
    if ending == "flood":
        return "failed", f"output exceeded {err.cap * _KILL_OUTPUT_FACTOR} bytes; process tree killed"
    if rc == 0:
        return "passed", ""
    sig = iso.signal_of(backend, rc)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu is not None and cpu >= limits.cpu_s - 0.05):
        return "timeout", f"CPU-time limit of {limits.cpu_s} s reached"
    if sig is not None:
        oom = " (memory cgroup limit)" if slot is not None and slot.oom_killed() else ""
        return "failed", f"killed by {signal.Signals(sig).name}{oom}"
    return "failed", f"exit code {rc}"
