"""The allow-list view of the host a sandboxed program sees, as data that both backends render.

A :class:`View` is an ordered list of mount operations on an empty root: the system's software
(``/usr`` without ``/usr/local``, the merged-usr links), a handful of ``/etc`` files, an empty
private ``/tmp``, the interpreter's own directories (resolved once per interpreter by asking it),
a minimal ``/dev``, a fresh ``/proc`` and the work dir. Nothing else of the host exists inside.
bwrap renders it as arguments (:func:`bwrap_args`), the ``unshare`` backend as a shell script that
builds a tmpfs root and ``pivot_root`` s into it (:func:`unshare_script`). Private to
``streamgen.scoring``; docs/sandbox.md has the threat model.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

logger = logging.getLogger(__name__)

VIEW_VERSION = "allowlist-1"
"""Recorded with every result (``sandbox_view``); bump when what the program can see changes."""
INNER_DIR = "/tmp/sandbox"  # the work dir as the program sees it (its cwd and HOME)
ETC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "view_etc")
# Read-only from the host: system software; everything here is world-readable by convention.
_SYSTEM_DIRS = ("/usr",)
_MERGED_USR = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_MASKS = ("/usr/local",)  # site-installed software and its config: hidden unless allowed
# /etc files the dynamic loader and the C library read; the rest of /etc is not shown.
_HOST_ETC = ("/etc/ld.so.cache", "/etc/localtime")
_OWN_ETC = ("passwd", "group", "hosts", "nsswitch.conf")  # synthetic: no host users or names
_DEV_NODES = ("null", "zero", "full", "random", "urandom")
_DEV_LINKS = (("/proc/self/fd", "/dev/fd"), ("/proc/self/fd/0", "/dev/stdin"),
              ("/proc/self/fd/1", "/dev/stdout"), ("/proc/self/fd/2", "/dev/stderr"))
_QUERY_TIMEOUT_S = 60.0
# Asked of the interpreter (as the program will run it: -I) once: where it lives and imports from.
_QUERY = """import json, sys, sysconfig
print(json.dumps({"executable": sys.executable, "paths": [sys.prefix, sys.base_prefix, sys.exec_prefix,
    sys.base_exec_prefix, *sys.path, *sysconfig.get_paths().values()]}))"""

Kind = Literal["ro-bind", "dev-bind", "tmpfs", "symlink", "proc", "work", "remount-ro"]


class ViewError(RuntimeError):
    """The interpreter could not be resolved into a view (missing, broken, not a Python)."""


@dataclass(frozen=True)
class Op:
    """One step of building the root. ``tmpfs`` ``size`` None means the run's tmp size."""

    kind: Kind
    dest: str
    source: str = ""
    size: int | None = None
    mode: str = "755"


@dataclass(frozen=True)
class View:
    """What a program sees: ``ops`` applied in order to an empty root; ``executable`` is the
    interpreter path to run inside (as the interpreter reports it; venv symlinks kept)."""

    executable: str
    ops: tuple[Op, ...]
    allowed: tuple[str, ...]  # host paths bound read-only for the interpreter (for logs and docs)


def system_ops() -> tuple[Op, ...]:
    """The part of every view that does not depend on the interpreter (in mount order)."""
    ops = [Op("ro-bind", d, d) for d in _SYSTEM_DIRS if os.path.isdir(d)]
    ops += [Op("tmpfs", d, size=65536) for d in _masks()]
    for d in _MERGED_USR:
        if os.path.islink(d):
            ops.append(Op("symlink", d, os.readlink(d)))
        elif os.path.isdir(d):
            ops.append(Op("ro-bind", d, d))
    ops += [Op("ro-bind", f, os.path.realpath(f)) for f in _HOST_ETC if os.path.exists(f)]
    ops += [Op("ro-bind", f"/etc/{n}", os.path.join(ETC_DIR, n)) for n in _OWN_ETC]
    ops.append(Op("tmpfs", "/tmp", mode="1777"))
    return tuple(ops)


def closing_ops() -> tuple[Op, ...]:
    """A minimal /dev, a fresh /proc, the work dir, then the root made read-only."""
    ops = [Op("tmpfs", "/dev", size=65536)]
    ops += [Op("dev-bind", f"/dev/{n}", f"/dev/{n}") for n in _DEV_NODES]
    ops += [Op("symlink", dest, target) for target, dest in _DEV_LINKS]
    ops += [Op("tmpfs", "/dev/shm", mode="1777"), Op("proc", "/proc"), Op("work", INNER_DIR)]
    ops += [Op("remount-ro", d) for d in _masks()]  # after the interpreter's dirs are bound in
    return (*ops, Op("remount-ro", "/"))


def _masks() -> list[str]:
    return [d for d in _SYSTEM_MASKS if os.path.isdir(d)]


def base_view(executable: str) -> View:
    """The view without an interpreter's directories (for tools in /usr, e.g. the probe's sh)."""
    return View(executable, system_ops() + closing_ops(), ())


def interpreter_view(python: str) -> View:
    """The view for `python` (a path): the system part plus everything the interpreter needs.

    Resolved once per interpreter by running it (``-I``, stdlib only) outside the sandbox: it is
    the scorer's own trusted interpreter, not the program. Raises :class:`ViewError`."""
    with _RESOLVING:  # parallel scorers ask at once: resolve once, not once per thread
        return _interpreter_view(python)


_RESOLVING = threading.Lock()


@lru_cache(maxsize=32)
def _interpreter_view(python: str) -> View:
    executable, paths = _query(python)
    paths += _exe_chain(executable) + _shared_libs(os.path.realpath(executable))
    allowed = _minimal_cover(paths)
    ops = [Op("symlink", p, os.readlink(p)) if os.path.islink(p) else Op("ro-bind", p, os.path.realpath(p))
           for p in allowed]
    logger.info("sandbox view for %s (%s): read-only %s", python, VIEW_VERSION, ", ".join(allowed))
    return View(executable, system_ops() + tuple(ops) + closing_ops(), tuple(allowed))


def _query(python: str) -> tuple[str, list[str]]:
    try:
        res = subprocess.run([python, "-I", "-c", _QUERY], capture_output=True, timeout=_QUERY_TIMEOUT_S,
                             env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ViewError(f"could not run the interpreter {python} to resolve its view: {exc}") from exc
    try:
        info = json.loads(res.stdout.decode().strip().splitlines()[-1])
        executable, paths = str(info["executable"]), [str(p) for p in info["paths"]]
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        first = (res.stderr.decode(errors="replace").strip().splitlines() or [""])[0][:300]
        raise ViewError(f"the interpreter {python} could not describe itself (exit code "
                        f"{res.returncode}): {first or 'it printed nothing'}") from exc
    if not os.path.isabs(executable):
        raise ViewError(f"the interpreter {python} reports no usable sys.executable ({executable!r})")
    return executable, paths


def _exe_chain(executable: str) -> list[str]:
    """The executable and every hop of its symlink chain (a venv's python → the base's binary)."""
    chain, path = [executable], executable
    for _ in range(16):
        if not os.path.islink(path):
            break
        path = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
        chain.append(path)
    return chain


def _shared_libs(binary: str) -> list[str]:
    """Shared libraries the interpreter binary loads (ldd), e.g. libpython outside /usr."""
    if shutil.which("ldd") is None:
        return []
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return re.findall(r"(/\S+) \(0x", out)


def _minimal_cover(paths: list[str]) -> list[str]:
    """Existing absolute paths (as given and resolved), without those already covered by a
    broader one or by the system part; never ``/`` itself."""
    found: set[str] = set()
    for p in paths:
        if not p or not os.path.isabs(p) or not os.path.lexists(p):
            continue
        for q in {os.path.normpath(p), os.path.realpath(p)}:
            if q == "/":
                logger.warning("not exposing / to the sandbox (it is on the interpreter's path)")
            elif not _system_covered(q):
                found.add(q)
    ordered = sorted(found)
    return [p for p in ordered if not any(p.startswith(a + "/") for a in ordered if a != p)]


def _system_covered(path: str) -> bool:
    inside = any(path == d or path.startswith(d + "/") for d in _SYSTEM_DIRS + _MERGED_USR)
    masked = any(path == m or path.startswith(m + "/") for m in _SYSTEM_MASKS)
    return inside and not masked


# ---------------------------------------------------------------------------------------- bwrap


def bwrap_args(view: View, workdir: str, tmp_bytes: int) -> list[str]:
    """bwrap arguments that build `view` (after the namespace options)."""
    args: list[str] = []
    for op in view.ops:
        if op.kind in ("ro-bind", "dev-bind"):
            args += [f"--{op.kind}", op.source, op.dest]
        elif op.kind == "tmpfs":
            args += ["--perms", op.mode, "--size", str(op.size or tmp_bytes), "--tmpfs", op.dest]
        elif op.kind == "symlink":
            args += ["--symlink", op.source, op.dest]
        elif op.kind == "proc":
            args += ["--proc", op.dest]
        elif op.kind == "work":
            args += ["--bind", workdir, op.dest, "--chdir", op.dest]
        else:
            args += ["--remount-ro", op.dest]
    return args


# -------------------------------------------------------------------------------------- unshare

# Runs as root of fresh user+mount+pid namespaces (mount propagation private): mounts a tmpfs root
# on $R (an empty host dir of this run), builds the view in it, pivots into it, detaches the old
# root, drops every capability and runs the program as a child (the shell stays pid 1, so the
# program's death by a signal comes back as 128+N and everything dies with it).
_UNSHARE_PROLOGUE = r"""
R=$1; size=$2; shift 2; wd=$(pwd); path=$PATH; PATH=/usr/sbin:/sbin:$PATH
ro() { if [ -d "$1" ]; then [ -d "$R$2" ] || mkdir -p "$R$2"
       else [ -d "$R${2%/*}" ] || mkdir -p "$R${2%/*}"; : > "$R$2"; fi
       mount --rbind "$1" "$R$2"; mount -o remount,bind,ro,nosuid,nodev "$R$2"
       while read -r _ m _; do case "$m" in "$R$2"/*) mount -o remount,bind,ro,nosuid,nodev "$m";; esac
       done < /proc/self/mounts; }
dv() { : > "$R$2"; mount --bind "$1" "$R$2"; }
tm() { [ -d "$R$1" ] || mkdir -p "$R$1"; mount -t tmpfs -o "size=$2,mode=$3,nosuid,nodev" tmpfs "$R$1"; }
ln_() { [ -d "$R${2%/*}" ] || mkdir -p "$R${2%/*}"; ln -s "$1" "$R$2"; }
mount -t tmpfs -o size=1m,mode=755,nosuid,nodev tmpfs "$R"
"""
_UNSHARE_EPILOGUE = r"""
cd "$R"
pivot_root . .
umount -l .
cd /tmp/sandbox
PATH=$path
set +e
setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
exit $?
"""


@lru_cache(maxsize=32)
def unshare_script(view: View) -> str:
    """The ``sh -e`` script that builds `view`; arguments: mount point, tmp size, then the argv."""
    q = shlex.quote
    lines = []
    for op in view.ops:
        if op.kind == "ro-bind":
            lines.append(f"ro {q(op.source)} {q(op.dest)}")
        elif op.kind == "dev-bind":
            lines.append(f"dv {q(op.source)} {q(op.dest)}")
        elif op.kind == "tmpfs":
            size = str(op.size) if op.size else '"$size"'
            lines.append(f"tm {q(op.dest)} {size} {op.mode}")
        elif op.kind == "symlink":
            lines.append(f"ln_ {q(op.source)} {q(op.dest)}")
        elif op.kind == "proc":
            lines.append(f'mkdir -p "$R"{q(op.dest)}; mount -t proc -o nosuid,nodev,noexec proc "$R"{q(op.dest)}')
        elif op.kind == "work":
            lines.append(f'mkdir "$R"{q(op.dest)}; mount --bind "$wd" "$R"{q(op.dest)}; mount -o remount,bind,nosuid,nodev "$R"{q(op.dest)}')
        else:
            lines.append(f'mount -o remount,bind,ro,nosuid,nodev "$R"{q(op.dest) if op.dest != "/" else ""}')
    return _UNSHARE_PROLOGUE + "\n".join(lines) + _UNSHARE_EPILOGUE
