"""Hostile programs: each test attempts an escape and asserts its effect did NOT happen.

Every case must also end within its limit + 2 s, and the test process must survive. Cases run on
every backend that can withstand them (the fallbacks' runs are marked `slow`); the rlimit-only fallback is no filesystem, network or
process boundary (docs/sandbox.md), so those cases run on the namespace backends only.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamgen.scoring import _isolation as iso
from streamgen.scoring import _view, sandbox
from streamgen.scoring._isolation import cgroup_bases
from streamgen.scoring.sandbox import ExecutionResult, execute

BACKENDS = sandbox.available_backends()
ISOLATING = [b for b in BACKENDS if b != "rlimit-only"]
SLACK_S = 2.0


def run(program: str, backend: str, *, timeout_s: float = 3, **kw) -> ExecutionResult:
    start = time.monotonic()
    r = execute(program, timeout_s=timeout_s, backend=backend, **kw)
    elapsed = time.monotonic() - start
    assert elapsed < timeout_s + SLACK_S, f"took {elapsed:.1f} s with a {timeout_s} s limit: {r}"
    return r


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def sleep_marker() -> str:
    """A `sleep` argument that is a valid duration and unique to this test: 900.<digits>."""
    return f"900.{uuid.uuid4().int % 10**12:012d}"


def capped(backend: str) -> bool:
    return execute("pass", timeout_s=10, backend=backend).processes_capped


def _params(backends: list[str] | tuple[str, ...]) -> list:
    """The preferred backend in the default tier; the fallbacks (same cases) marked slow."""
    preferred = sandbox.select_backend() if BACKENDS else None
    return [pytest.param(b, marks=() if b == preferred else pytest.mark.slow) for b in backends]


@pytest.fixture(params=_params(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=_params(ISOLATING))
def isolating(request: pytest.FixtureRequest) -> str:
    return request.param


def test_fork_bomb_is_capped_and_cleaned_up(backend: str) -> None:
    if not capped(backend):
        pytest.skip("no pids cgroup and root ignores RLIMIT_NPROC: process count not enforceable here")
    marker = sleep_marker()
    prog = f"""import os, time
n = 0
try:
    while n < 10_000:
        if os.fork() == 0:
            os.execv('/bin/sleep', ['sleep', '{marker}'])
        n += 1
except OSError as exc:
    print('forks', n, exc.errno, flush=True)
"""
    r = run(prog, backend, max_processes=20)
    assert r.status == "passed", r
    forks = int(r.stdout.split()[1])
    assert forks + 1 <= 20, r.stdout  # max_processes counts the program itself
    assert processes_with(marker) == []


def test_raw_fork_bomb_times_out_and_the_machine_still_works(backend: str) -> None:
    if not capped(backend):
        pytest.skip("no pids cgroup and root ignores RLIMIT_NPROC: process count not enforceable here")
    prog = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    r = run(prog, backend, timeout_s=2, max_processes=32)
    assert r.status == "timeout"
    assert run("print('alive')", backend).stdout == "alive\n"


def test_memory_bomb_fails_within_the_limit(backend: str) -> None:
    prog = """x = []
while True:
    x.append(bytearray(32 << 20))
    print(len(x) * 32, flush=True)
"""
    r = run(prog, backend, timeout_s=10, memory_bytes=512 << 20)  # zeroing is slow under load
    assert r.status == "failed" and "MemoryError" in r.stderr
    assert max(int(line) for line in r.stdout.split()) <= 512


def test_loop_that_ignores_sigterm_is_killed(backend: str) -> None:
    prog = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    r = run(prog, backend, timeout_s=2)
    assert r.status == "timeout"


def test_no_writes_or_deletes_outside_the_work_dir(isolating: str) -> None:
    victim_dir = Path.home() / ".cache" / f"streamgen-sandbox-victim-{uuid.uuid4().hex[:8]}"
    victim_dir.mkdir(parents=True)
    victim = victim_dir / "precious.txt"
    victim.write_text("keep me")
    planted = [victim_dir / "planted.txt", Path("/etc/streamgen-planted"), Path("/usr/streamgen-planted")]
    prog = f"""import os, shutil
for attempt in (lambda: os.remove({str(victim)!r}),
                lambda: shutil.rmtree({str(victim_dir)!r}),
                lambda: open({str(victim)!r}, 'w').write('owned'),
                *[lambda p=p: open(p, 'w').write('x') for p in {[str(p) for p in planted]!r}]):
    try:
        attempt()
        print('SUCCEEDED')
    except OSError as exc:
        print('blocked', exc.errno)
"""
    try:
        r = run(prog, isolating)
        assert r.status == "passed", r
        assert "SUCCEEDED" not in r.stdout
        assert victim.read_text() == "keep me"
        assert not any(p.exists() for p in planted)
    finally:
        for p in (victim, *planted):
            p.unlink(missing_ok=True)
        victim_dir.rmdir()


def test_private_tmp_leaves_nothing_behind(isolating: str) -> None:
    name = f"streamgen-planted-{uuid.uuid4().hex[:8]}"
    r = run(f"open('/tmp/{name}', 'w').write('x')\nopen('/dev/shm/{name}', 'w').write('x')", isolating)
    assert r.status == "passed"
    assert not os.path.exists(f"/tmp/{name}") and not os.path.exists(f"/dev/shm/{name}")


def test_environment_secrets_are_not_readable(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("STREAMGEN_API_TOKEN", secret)
    prog = f"""import os
print(dict(os.environ))
print(open('/proc/self/environ', 'rb').read())
for pid in ('1', str(os.getppid()), {str(os.getpid())!r}):
    try:
        print(open(f'/proc/{{pid}}/environ', 'rb').read())
    except OSError as exc:
        print('blocked', exc.errno)
"""
    r = run(prog, backend)
    assert r.status == "passed", r
    assert secret not in r.stdout and "STREAMGEN_API_TOKEN" not in r.stdout


def test_host_processes_are_invisible(isolating: str) -> None:
    r = run(f"import os\nprint(os.path.exists('/proc/{os.getpid()}/environ'), len(os.listdir('/proc')))",
            isolating)
    visible = r.stdout.split()[0]
    assert r.status == "passed" and visible == "False", r.stdout


def test_no_tcp_connection_to_a_loopback_listener(isolating: str) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    prog = f"""import socket
for host in ('127.0.0.1', 'localhost'):
    try:
        socket.create_connection((host, {port}), timeout=1).sendall(b'leak')
        print('CONNECTED')
    except OSError as exc:
        print('blocked', exc.errno)
"""
    try:
        r = run(prog, isolating)
        time.sleep(0.2)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert r.status == "passed" and "CONNECTED" not in r.stdout, r.stdout


def test_rlimit_only_says_it_has_no_network_isolation() -> None:
    if "rlimit-only" not in BACKENDS:
        pytest.skip("rlimit-only backend unavailable")
    assert execute("pass", timeout_s=10, backend="rlimit-only").network_isolated is False


def test_detached_child_is_dead_after_execute_returns(backend: str) -> None:
    marker = sleep_marker()
    prog = f"""import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 3)
        os.execv('/bin/sleep', ['sleep', '{marker}'])
    os._exit(0)
print('parent done')
"""
    r = run(prog, backend)
    assert r.status == "passed" and r.stdout == "parent done\n"
    assert processes_with(marker) == []
    time.sleep(0.3)
    assert processes_with(marker) == []


def test_detached_child_holding_the_pipes_does_not_hold_execute(backend: str) -> None:
    marker = sleep_marker()
    prog = f"""import os
if os.fork() == 0:
    os.setsid()
    os.execv('/bin/sleep', ['sleep', '{marker}'])
print('parent done')
"""
    r = run(prog, backend, timeout_s=5)
    assert r.status == "passed" and r.wall_s < 3
    assert processes_with(marker) == []


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_flood_is_capped_and_returns_promptly(backend: str, stream: str) -> None:
    prog = f"import sys\nwhile True:\n    sys.{stream}.write('x' * 65536)\n"
    r = run(prog, backend, timeout_s=5, max_output_bytes=4096)
    assert r.status == "failed" and "output exceeded" in r.detail
    text = getattr(r, stream)
    assert len(text) == 4096 and getattr(r, f"{stream}_truncated")
    assert r.wall_s < 5


def test_killing_the_parent_does_not_kill_the_caller(backend: str) -> None:
    prog = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('sent')\n"
    r = run(prog, backend)
    assert r.status in ("passed", "failed")
    assert os.getpid() > 0  # still here
    after = run("print('still works')", backend)
    assert after.status == "passed"


def test_fork_and_allocate_bomb_is_held_by_the_memory_cgroup(backend: str) -> None:
    """RLIMIT_AS is per process; the run's memory cgroup caps the sum over its processes."""
    if "memory" not in (cgroup_bases() or {}):
        pytest.skip("no writable memory cgroup here")
    prog = """import os, time
r, w = os.pipe()
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        b = bytearray(200 << 20)
        os.write(w, b'%8d' % os.getpid())
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
os.set_blocking(r, False)
holders, dead, deadline = set(), set(), time.time() + 4
while time.time() < deadline and len(holders | dead) < 4:
    try:
        holders.update(int(x) for x in os.read(r, 64).split())
    except BlockingIOError:
        time.sleep(0.05)
    dead.update(p for p in kids if p not in dead and os.waitpid(p, os.WNOHANG)[0])
time.sleep(0.3)
dead.update(p for p in kids if p not in dead and os.waitpid(p, os.WNOHANG)[0])
print('alive holders', len(holders - dead), 'killed', len(dead))
"""
    # the cgroup limit is memory_bytes + tmpfs size = 256 + 256 MiB: two live 200 MiB children at most
    r = run(prog, backend, timeout_s=8, memory_bytes=256 << 20)
    assert r.status == "passed", r
    alive_holders, killed = int(r.stdout.split()[2]), int(r.stdout.split()[4])
    assert alive_holders <= 2 and killed >= 1, r.stdout


def test_no_capabilities_and_no_disk_devices(isolating: str) -> None:
    prog = """import os
caps = dict(line.split(':\\t') for line in open('/proc/self/status').read().splitlines() if line.startswith('Cap'))
print(int(caps['CapEff'], 16), int(caps['CapBnd'], 16))
print([d for d in os.listdir('/dev') if d.startswith(('vd', 'sd', 'nvme', 'zram', 'loop', 'kmsg', 'mem'))])
"""
    r = run(prog, isolating)
    assert r.status == "passed", r
    assert r.stdout.splitlines() == ["0 0", "[]"]


def test_unshare_backend_as_root_without_user_namespaces(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """Clusters that forbid user namespaces: root enters the same namespaces with its real
    capabilities, and the script drops them before the program starts."""
    if "unshare" not in BACKENDS or os.geteuid() != 0:
        pytest.skip("needs root and a working unshare backend")
    monkeypatch.setattr(iso, "unshare_userns", lambda: False)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    prog = f"""import os, socket
caps = [l for l in open('/proc/self/status').read().splitlines() if l.startswith('CapEff')]
print(os.getuid(), int(caps[0].split()[1], 16))
print(sorted(os.listdir('/')))
for attempt in (lambda: os.remove({str(victim)!r}), lambda: open('/etc/sg-planted', 'w'),
                lambda: os.open('/dev/vda', os.O_RDONLY),
                lambda: socket.create_connection(('127.0.0.1', 22), timeout=1)):
    try:
        attempt()
        print('SUCCEEDED')
    except OSError as exc:
        print('blocked', exc.errno)
"""
    r = run(prog, "unshare")
    assert r.status == "passed", r
    view = _view.interpreter_view(os.path.realpath(sys.executable))
    assert r.stdout.splitlines()[1] == str(sorted({op.dest.split("/")[1] for op in view.ops if op.dest != "/"}))
    assert r.stdout.splitlines()[0] == "0 0" and "SUCCEEDED" not in r.stdout
    assert victim.read_text() == "keep me" and not os.path.exists("/etc/sg-planted")


def test_secret_files_in_home_dirs_are_hidden(isolating: str) -> None:
    secret_file = Path.home() / ".cache" / f"streamgen-test-token-{uuid.uuid4().hex[:8]}"
    secret_file.parent.mkdir(parents=True, exist_ok=True)
    secret = f"tok-{uuid.uuid4().hex}"
    secret_file.write_text(secret)
    prog = f"""try:
    print(open({str(secret_file)!r}).read())
except OSError as exc:
    print('blocked', exc.errno)
"""
    try:
        r = run(prog, isolating)
    finally:
        secret_file.unlink()
    assert r.status == "passed" and secret not in r.stdout and "blocked" in r.stdout, r


# --- the allow-list view: nothing of the host but what the program needs ------------------------


@pytest.fixture
def outside_dir() -> Iterator[Path]:
    """A fresh root-owned directory outside the allow-list, visible on the host."""
    parent = "/var/lib" if os.access("/var/lib", os.W_OK) else str(Path.home())
    path = Path(tempfile.mkdtemp(prefix="streamgen-outside-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _attempts(program_lines: list[str]) -> str:
    """A program running each expression, printing 'LEAK <repr>' on success or 'blocked <errno>'."""
    body = "\n".join(f"try:\n    print('LEAK', repr({line}))\nexcept OSError as exc:\n    print('blocked', exc.errno)"
                     for line in program_lines)
    return "import os, socket\n" + body


def test_root_only_files_outside_the_allow_list_cannot_be_read_or_stated(isolating: str,
                                                                         outside_dir: Path) -> None:
    secret = f"root-only-{uuid.uuid4().hex}"
    target = outside_dir / "secret.txt"
    target.write_text(secret)
    target.chmod(0o600)
    host_only = [p for p in ("/etc/shadow", "/etc/hostname", "/run", "/var", "/sys", "/home", "/opt")
                 if os.path.exists(p)]
    assert os.access(target, os.R_OK) and host_only  # the host (root) sees all of them
    tries = [f"open({str(target)!r}).read()", f"os.stat({str(target)!r})", f"os.listdir({str(outside_dir)!r})",
             *[f"os.stat({p!r})" for p in host_only]]
    r = run(_attempts(tries), isolating)
    assert r.status == "passed", r
    assert secret not in r.stdout
    assert r.stdout.splitlines() == ["blocked 2"] * len(tries)  # every attempt ran; nothing exists there


def test_root_shows_exactly_the_allow_list(isolating: str) -> None:
    view = _view.interpreter_view(os.path.realpath(sys.executable))
    expected_top = sorted({op.dest.split("/")[1] for op in view.ops if op.dest != "/"})
    prog = """import os
print(sorted(os.listdir('/')))
print(sorted(os.listdir('/etc')))
print(sorted(os.listdir('/tmp')), sorted(os.listdir('/dev/shm')), sorted(os.listdir('/usr/local')))
print(' '.join(line.split()[4] for line in open('/proc/self/mountinfo')))
"""
    r = run(prog, isolating)
    assert r.status == "passed", r
    top, etc, rest, mounts = r.stdout.splitlines()
    # the namespace holds the view's mounts and nothing of the host's tree (no stacked old root)
    points = mounts.split()
    assert points.count("/") == 1 and set(points) <= {"/"} | {op.dest for op in view.ops}, points
    assert top == str(expected_top)
    assert etc == str(sorted({op.dest.split("/")[2] for op in view.ops if op.dest.startswith("/etc/")}))
    assert rest == "['sandbox'] [] []"
    assert not {"home", "run", "var", "srv", "opt", "mnt", "sys", "work"} & set(eval(top))  # noqa: S307


def test_host_unix_sockets_are_unreachable(isolating: str, outside_dir: Path) -> None:
    path = str(outside_dir / "service.sock")
    abstract = f"\0streamgen-test-{uuid.uuid4().hex[:12]}"
    listeners = []
    for address in (path, abstract):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(address)
        s.listen(8)
        s.setblocking(False)
        listeners.append(s)
    try:
        with socket.socket(socket.AF_UNIX) as probe:  # the host can reach the path socket
            probe.connect(path)
            time.sleep(0.05)
            listeners[0].accept()[0].close()
        tries = [f"socket.socket(socket.AF_UNIX).connect({a!r})" for a in (path, abstract)]
        r = run(_attempts(tries), isolating)
        time.sleep(0.2)
        for s in listeners:
            with pytest.raises(BlockingIOError):
                s.accept()
    finally:
        for s in listeners:
            s.close()
    assert r.status == "passed" and "LEAK" not in r.stdout, r.stdout
    assert r.stdout.splitlines() == ["blocked 2", "blocked 111"]  # no such file; refused (own netns)


def test_no_tcp_or_udp_leaves_the_network_namespace(isolating: str) -> None:
    listeners, receivers = [], []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        t = socket.socket(family, socket.SOCK_STREAM)
        t.bind((host, 0))
        t.listen(8)
        t.setblocking(False)
        u = socket.socket(family, socket.SOCK_DGRAM)
        u.bind((host, 0))
        u.setblocking(False)
        listeners.append((host, t))
        receivers.append((host, u))
    tries = [f"socket.create_connection(({h!r}, {s.getsockname()[1]}), timeout=1).sendall(b'leak')"
             for h, s in listeners]
    udp = "".join(f"\nsocket.socket({'socket.AF_INET6' if ':' in h else 'socket.AF_INET'}, socket.SOCK_DGRAM)"
                  f".sendto(b'leak', ({h!r}, {u.getsockname()[1]}))" for h, u in receivers)
    prog = _attempts(tries) + "\nprint(sorted(n for _, n in socket.if_nameindex()))" + \
        f"\ntry:{udp.replace(chr(10), chr(10) + '    ')}\nexcept OSError as exc:\n    print('udp blocked', exc.errno)"
    try:
        r = run(prog, isolating)
        time.sleep(0.2)
        for _, t in listeners:
            with pytest.raises(BlockingIOError):
                t.accept()
        for _, u in receivers:
            with pytest.raises(BlockingIOError):
                u.recvfrom(64)
    finally:
        for _, s in listeners + receivers:
            s.close()
    assert r.status == "passed", r
    lines = r.stdout.splitlines()
    assert all(x.startswith("blocked") for x in lines[:2]) and lines[3:] == ["udp blocked 101"] or \
        lines[3:] == [], lines  # unreachable (lo down) or sent into the namespace's own loopback
    assert lines[2] == "['lo']", lines  # the namespace's own loopback only: no route to the host


def test_writes_anywhere_but_the_work_dir_do_not_reach_the_host(isolating: str, tmp_path: Path) -> None:
    name = f"sg-planted-{uuid.uuid4().hex[:8]}"
    site = sysconfig.get_paths()["purelib"]
    targets = [f"/{name}", f"/etc/{name}", f"/usr/{name}", f"{site}/{name}.pth", f"/tmp/{name}",
               f"/dev/shm/{name}", f"/var/tmp/{name}", f"{tmp_path}/{name}", f"/root/{name}"]
    prog = f"""import os
for p in {targets!r}:
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        open(p, 'w').write('x')
        print('wrote', p)
    except OSError as exc:
        print('blocked', exc.errno)
open('kept-in-work-dir', 'w').write('x')
print(os.listdir('.'))
"""
    try:
        r = run(prog, isolating)
        leaked = [p for p in targets if os.path.exists(p)]
    finally:  # a broken sandbox must not leave a .pth in site-packages behind
        for p in targets:
            Path(p).unlink(missing_ok=True)
    assert r.status == "passed", r
    assert "['main.py', 'kept-in-work-dir']" in r.stdout or "['kept-in-work-dir', 'main.py']" in r.stdout
    assert len(r.stdout.splitlines()) == len(targets) + 1  # every attempt ran
    assert leaked == []
