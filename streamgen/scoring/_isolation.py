"""Isolation backends for the sandbox: command lines, probing, rlimits and per-run cgroups.

Private to `streamgen.scoring.sandbox`; docs/sandbox.md explains each choice.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

from streamgen.scoring._view import INNER_DIR, View, base_view, bwrap_args, unshare_script

logger = logging.getLogger(__name__)

Backend = Literal["bwrap", "unshare", "rlimit-only"]
BACKENDS: tuple[Backend, ...] = ("bwrap", "unshare", "rlimit-only")
PROGRAM_NAME = "main.py"
_SANDBOX_UID = "65534"  # "nobody" inside the user namespace
_CGROUP_ROOT = "/sys/fs/cgroup"
# Processes of ours inside the run's cgroup besides the program's: bwrap's outer process and its
# init, unshare and its pid-1 shell, or the rlimit-only shell.
_OVERHEAD_PIDS: dict[str, int] = {"bwrap": 2, "unshare": 2, "rlimit-only": 1}
# Joins the per-run cgroups before anything else starts, so every descendant is counted.
_CGROUP_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run (seconds and bytes)."""

    cpu_s: int
    memory_bytes: int
    file_size_bytes: int
    max_processes: int
    tmp_bytes: int = 256 << 20


def scrubbed_env(python: str, home: str = INNER_DIR) -> dict[str, str]:
    """The whole environment a program sees: no secrets, one thread per numeric library."""
    bindir = os.path.dirname(os.path.abspath(python))
    return {
        "PATH": f"{bindir}:/usr/bin:/bin", "HOME": home, "TMPDIR": "/tmp",
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1", "MPLBACKEND": "Agg",
    }


# Runs the program as `python -I main.py` would (``__main__``, ``__file__``, argv[0]), after writing
# one byte to the start-marker pipe: the sandbox then knows the program itself started, so any later
# failure is the program's verdict and anything earlier is the sandbox's error. Tracebacks start
# at the program's own frames (the bootstrap's and runpy's are dropped).
_BOOTSTRAP = """import os, runpy, sys
os.write({fd}, b'1')
os.close({fd})
def _own_frames(kind, value, tb, _hook=sys.excepthook):
    while tb is not None and tb.tb_frame.f_code.co_filename != {name!r}:
        tb = tb.tb_next
    _hook(kind, value.with_traceback(tb), tb)
sys.excepthook = _own_frames
del os, sys, _own_frames
runpy.run_path({name!r}, run_name='__main__')
"""


class RunDirs(NamedTuple):
    """A run's host directories: ``base`` (removed afterwards) holds ``work`` (the program's work
    dir) and ``mount`` (an empty mount point for the unshare backend's new root)."""

    base: str
    work: str
    mount: str

    @classmethod
    def create(cls, parent: str | None) -> RunDirs:
        base = tempfile.mkdtemp(prefix="streamgen-sbx-", dir=parent)
        dirs = cls(base, os.path.join(base, "work"), os.path.join(base, "root"))
        os.mkdir(dirs.work)
        os.mkdir(dirs.mount)
        return dirs


def command(backend: Backend, view: View, dirs: RunDirs, limits: Limits,
            slot: CgroupSlot | None, marker_fd: int) -> list[str]:
    """The argv that runs ``main.py`` in the work dir with ``python -I`` behind `backend`."""
    bootstrap = _BOOTSTRAP.format(fd=marker_fd, name=PROGRAM_NAME)
    return wrap(backend, [view.executable, "-I", "-c", bootstrap], dirs, limits, slot, view)


def wrap(backend: Backend, tail: list[str], dirs: RunDirs, limits: Limits,
         slot: CgroupSlot | None, view: View) -> list[str]:
    """`tail` behind `backend`, seeing `view` (namespace backends), under the run's rlimits."""
    inner = _prlimit(limits) + tail
    if backend == "bwrap":
        argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", _SANDBOX_UID, "--gid", _SANDBOX_UID,
                "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "sandbox",
                *bwrap_args(view, dirs.work, limits.tmp_bytes), "--"] + inner
    elif backend == "unshare":
        userns = ["--user", "--map-root-user"] if unshare_userns() else []  # root manages without
        argv = ["setpriv", "--pdeathsig", "KILL", "--", "unshare", *userns, "--net", "--pid", "--ipc",
                "--uts", "--mount", "--propagation", "private", "--fork", "--kill-child", "--",
                "sh", "-e", "-c", unshare_script(view), "sh", dirs.mount, str(limits.tmp_bytes)] + inner
    else:  # a shell in between, so the program's parent is not the caller (os.getppid() kills)
        argv = ["setpriv", "--pdeathsig", "KILL", "--", "sh", "-c", '"$@"; exit $?', "sh"] + inner
    if slot is not None:
        argv = ["sh", "-c", _CGROUP_JOIN, "sh", *slot.procs_files, "--"] + argv
    return argv


@lru_cache(maxsize=1)
def unshare_userns() -> bool:
    """Whether `unshare` may create a user namespace here; if not, only root can use that backend
    (the same namespaces, entered with real root's capabilities, which the script then drops)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _prlimit(limits: Limits) -> list[str]:
    nproc = limits.max_processes
    if os.geteuid() != 0:  # RLIMIT_NPROC counts all processes of the real uid, not just ours
        nproc += _count_own_processes()
    return ["prlimit", f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}", f"--as={limits.memory_bytes}",
            f"--fsize={limits.file_size_bytes}", "--core=0", f"--nproc={nproc}", "--"]


def _count_own_processes() -> int:
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                continue
    return count


def signal_of(backend: Backend, returncode: int | None) -> int | None:
    """The signal that ended the program: a negative code, or 128+N as bwrap and sh report it
    (every backend runs the program under a shell or bwrap, so a plain exit code above 128 reads
    as a signal too; both are `failed`)."""
    if returncode is None or returncode == 0:
        return None
    if returncode < 0:
        return -returncode
    if 128 < returncode < 128 + signal.NSIG:
        return returncode - 128
    return None


def probe(backend: Backend) -> bool:
    """Whether `backend` can run a trivial command here (tools present, namespaces allowed)."""
    tools = {"bwrap": ["bwrap", "prlimit"], "unshare": ["unshare", "setpriv", "prlimit"],
             "rlimit-only": ["setpriv", "prlimit"]}[backend]
    if any(shutil.which(t) is None for t in tools):
        logger.info("sandbox backend %s unavailable: missing one of %s", backend, tools)
        return False
    limits = Limits(cpu_s=5, memory_bytes=1 << 30, file_size_bytes=1 << 20, max_processes=16)
    dirs = RunDirs.create(None)
    try:
        argv = wrap(backend, ["sh", "-c", "echo ok > probe && cat probe"], dirs, limits, None,
                    base_view("/bin/sh"))
        res = subprocess.run(argv, cwd=dirs.work, env=scrubbed_env("/bin/sh"), capture_output=True,
                             timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.info("sandbox backend %s unavailable: %s", backend, exc)
        return False
    finally:
        shutil.rmtree(dirs.base, ignore_errors=True)
    ok = res.returncode == 0 and res.stdout.strip() == b"ok"
    if not ok:
        logger.info("sandbox backend %s unavailable: rc=%s stderr=%s", backend, res.returncode,
                    res.stderr.decode(errors="replace")[:500])
    return ok


class CgroupSlot:
    """A per-run cgroup (v1 pids, plus memory where present) joined by the program's first process.

    pids.max caps processes for real (RLIMIT_NPROC is ignored for root and counts per uid otherwise)
    and the member list lets us kill descendants that left the process group.
    """

    def __init__(self, dirs: dict[str, str]) -> None:
        self.by_controller = dirs

    @property
    def dirs(self) -> list[str]:
        return list(self.by_controller.values())

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    @classmethod
    def create(cls, limits: Limits, backend: Backend) -> CgroupSlot | None:
        base = cgroup_bases()
        if base is None:
            return None
        name = f"sg-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        made: dict[str, str] = {}
        settings = {"pids": ("pids.max", limits.max_processes + _OVERHEAD_PIDS[backend]),
                    "memory": ("memory.limit_in_bytes", limits.memory_bytes + limits.tmp_bytes)}
        try:
            for controller, parent in base.items():
                made[controller] = os.path.join(parent, name)
                os.mkdir(made[controller])
                if controller in settings:
                    _write(made[controller], *settings[controller])
        except OSError as exc:
            logger.warning("could not set up a per-run cgroup (%s); process count falls back to "
                           "RLIMIT_NPROC", exc)
            cls(made).remove()
            return None
        return cls(made)

    def members(self) -> list[int]:
        pids: set[int] = set()
        for path in self.procs_files:
            try:
                with open(path) as fh:
                    pids.update(int(x) for x in fh.read().split())
            except OSError:
                continue
        return sorted(pids)

    def kill_all(self, budget_s: float = 3.0) -> None:
        deadline = time.monotonic() + budget_s
        while (pids := self.members()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            time.sleep(0.005)
        if self.members():
            logger.error("processes survived the sandbox kill in %s: %s", self.dirs, self.members())

    def cpu_s(self) -> float | None:
        """CPU seconds used by every process of the run (cpuacct), None where not accounted."""
        if "cpuacct" not in self.by_controller:
            return None
        try:
            with open(os.path.join(self.by_controller["cpuacct"], "cpuacct.usage")) as fh:
                return int(fh.read()) / 1e9
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        for d in self.dirs:
            try:
                with open(os.path.join(d, "memory.oom_control")) as fh:
                    fields = dict(line.split() for line in fh if line.strip())
            except (OSError, ValueError):
                continue
            if int(fields.get("oom_kill", "0")) > 0 or fields.get("under_oom") == "1":
                return True
        return False

    def remove(self) -> None:
        for d in reversed(self.dirs):
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # members still exiting
                    time.sleep(0.01)
            else:
                logger.warning("could not remove cgroup %s", d)


def _write(directory: str, name: str, value: int) -> None:  # noqa: D103
    with open(os.path.join(directory, name), "w") as fh:
        fh.write(str(value))


@lru_cache(maxsize=1)
def cgroup_bases() -> dict[str, str] | None:
    """Writable cgroup-v1 parents for our runs ({'pids': dir, 'memory': dir}), or None."""
    if os.geteuid() != 0:
        return None
    own = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(","):
                own[c] = path
    bases: dict[str, str] = {}
    for controller in ("pids", "memory", "cpuacct"):
        mount = os.path.join(_CGROUP_ROOT, controller)
        if controller in own and os.path.exists(os.path.join(mount, "cgroup.procs")):
            candidate = os.path.join(mount, own[controller].lstrip("/"), "streamgen-sandbox")
            try:
                os.makedirs(candidate, exist_ok=True)
                bases[controller] = candidate
            except OSError:
                continue
            _remove_stale(candidate)
    if "pids" not in bases:
        logger.info("no writable pids cgroup here; process count relies on RLIMIT_NPROC")
        return None
    return bases


def _remove_stale(parent: str) -> None:
    """Remove empty run cgroups left by processes that died before cleaning up (sg-<pid>-<id>).

    Only ones older than an hour: a process in another pid namespace sharing this cgroup tree
    looks dead from here, and its fresh, still-empty cgroup must not vanish before it joins."""
    for entry in os.scandir(parent):
        owner = entry.name.split("-")[1] if entry.name.startswith("sg-") else ""
        if (owner.isdigit() and not os.path.exists(f"/proc/{owner}")
                and time.time() - entry.stat().st_mtime > 3600):
            try:
                os.rmdir(entry.path)
            except OSError:
                continue  # still has members; a later run's kill_all is not ours to do
