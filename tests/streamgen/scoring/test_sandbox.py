"""The sandbox's verdicts, limits and bookkeeping on every backend that works on this machine.

Programs run only through `execute` (real subprocesses, real namespaces); nothing is mocked.
Hostile programs (escapes, bombs) are in test_sandbox_hostile.py.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile

import pytest

from streamgen.scoring import _view, sandbox
from streamgen.scoring.pool import SandboxJob, run_many
from streamgen.scoring.sandbox import ExecutionResult, SandboxError, execute

BACKENDS = sandbox.available_backends()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def run(program: str, backend: str, **kw) -> ExecutionResult:
    kw.setdefault("timeout_s", 10)
    return execute(program, backend=backend, **kw)


def test_backends_required_here_are_usable() -> None:
    """CI sets STREAMGEN_REQUIRE_BACKENDS=bwrap,unshare so that neither backend's tests can turn
    into skips unnoticed (the hostile cases run on each usable one)."""
    required = [b for b in os.environ.get("STREAMGEN_REQUIRE_BACKENDS", "").split(",") if b]
    assert not [b for b in required if b not in BACKENDS], (required, BACKENDS)


def test_some_backend_is_available_and_bwrap_preferred() -> None:
    assert BACKENDS, "no sandbox backend works here"
    assert BACKENDS[-1] == "rlimit-only"
    if "bwrap" in BACKENDS:
        assert sandbox.select_backend() == "bwrap"


def test_passed_captures_output(backend: str) -> None:
    r = run("import sys\nprint('out', 6 * 7)\nprint('err', file=sys.stderr)", backend)
    assert (r.status, r.returncode) == ("passed", 0)
    assert r.stdout == "out 42\n" and r.stderr == "err\n"
    assert r.backend == backend and not r.truncated
    assert r.network_isolated == (backend != "rlimit-only")
    assert 0 < r.wall_s < 10


@pytest.mark.parametrize("program, code", [("import sys; sys.exit(3)", 3),
                                           ("assert 1 == 2, 'nope'", 1),
                                           ("def f(:\n", 1)])
def test_failed_is_a_verdict_not_an_error(backend: str, program: str, code: int) -> None:
    r = run(program, backend)
    assert r.status == "failed" and r.returncode == code, r
    assert "exit code" in r.detail


def test_program_runs_as_main_script(backend: str) -> None:
    r = run("import sys\nprint(__name__, __file__, sys.argv[0])", backend)
    assert (r.status, r.stdout) == ("passed", "__main__ main.py main.py\n")


def test_program_imitating_sandbox_tool_messages_still_fails(backend: str) -> None:
    prog = "import os, sys\nos.system('no-such-command-xyz')\nsys.stderr.write('bwrap: fake\\n')\nsys.exit(1)"
    r = run(prog, backend)
    assert r.status == "failed" and r.stderr.startswith("sh: "), r


def test_interpreter_that_never_starts_the_program_is_an_error(backend: str) -> None:
    r = run("print(1)", backend, python="/bin/false")
    assert r.status == "error" and "before the program started" in r.detail, r


def test_exception_traceback_is_in_stderr(backend: str) -> None:
    r = run("def f():\n    raise KeyError('missing-key')\nf()", backend)
    assert r.status == "failed"
    assert r.stderr.splitlines()[1:] == ['  File "main.py", line 3, in <module>', "    f()",
                                         '  File "main.py", line 2, in f',
                                         "    raise KeyError('missing-key')", "KeyError: 'missing-key'"]


def test_wall_timeout_kills_a_sleeper(backend: str) -> None:
    r = run("import time\nprint('started', flush=True)\ntime.sleep(60)", backend, timeout_s=3)
    assert r.status == "timeout" and "wall" in r.detail
    assert r.stdout == "started\n"  # output written before the kill is kept
    assert 3 <= r.wall_s < 5


def test_cpu_limit_is_a_timeout(backend: str) -> None:
    r = run("while True:\n    pass", backend, timeout_s=8, cpu_s=1)
    assert r.status == "timeout" and "CPU" in r.detail, r
    assert r.wall_s < 8


def test_memory_limit_fails_the_program(backend: str) -> None:
    r = run("x = bytearray(3 << 30)\nprint('allocated')", backend, memory_bytes=1 << 30)
    assert r.status == "failed" and "allocated" not in r.stdout
    assert "MemoryError" in r.stderr


def test_file_size_limit(backend: str) -> None:
    prog = "open('big', 'wb').write(b'x' * (4 << 20))\nprint('wrote')"
    r = run(prog, backend, file_size_bytes=1 << 20)
    assert r.status == "failed" and "wrote" not in r.stdout
    assert "File too large" in r.stderr or "SIGXFSZ" in r.detail


def test_environment_is_scrubbed(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMGEN_TEST_SECRET", "hunter2")
    r = run("import os\nprint(sorted(os.environ))\nprint(os.environ.get('STREAMGEN_TEST_SECRET'))", backend)
    assert r.status == "passed"
    assert "hunter2" not in r.stdout and "STREAMGEN_TEST_SECRET" not in r.stdout
    assert "PATH" in r.stdout and "HOME" in r.stdout


def test_files_stdin_and_cwd(backend: str) -> None:
    prog = "import sys\nprint(open('data/in.txt').read().strip(), sys.stdin.read().strip())"
    r = run(prog, backend, files={"data/in.txt": "from-file"}, stdin="from-stdin\n")
    assert r.status == "passed" and r.stdout == "from-file from-stdin\n"


def test_work_dir_is_fresh_and_removed(backend: str, tmp_path) -> None:
    prog = ("import os\nprint(sorted(os.listdir('.')))\nopen('left-behind', 'w').write('x')\n"
            "os.makedirs('d/e')\nopen('d/e/f', 'w').write('x')\nos.chmod('d/e', 0)\nos.chmod('d', 0)")
    first = run(prog, backend, work_root=str(tmp_path))
    second = run(prog, backend, work_root=str(tmp_path))
    assert first.stdout == second.stdout == "['main.py']\n"
    assert list(tmp_path.iterdir()) == []


def test_unwritable_work_root_is_an_error(backend: str) -> None:
    r = run("print(1)", backend, work_root="/nonexistent/streamgen")
    assert r.status == "error" and "work dir" in r.detail


def test_output_is_capped(backend: str) -> None:
    r = run("print('y' * 20_000)", backend, max_output_bytes=1000)
    assert r.status == "passed"
    assert len(r.stdout) == 1000 and r.stdout_truncated and not r.stderr_truncated


def test_missing_interpreter_is_an_error_not_a_failure(backend: str) -> None:
    r = run("print(1)", backend, python="/nonexistent/bin/python3")
    assert r.status == "error" and "interpreter" in r.detail


def test_interpreter_is_configurable(backend: str) -> None:
    r = run("import sys\nprint(sys.executable, sys.flags.isolated)", backend, python=sys.executable)
    assert r.status == "passed"
    assert r.stdout.split() == [sys.executable, "1"]
    by_name = run("import sys\nprint(sys.version_info[0])", backend, python="python3")
    assert (by_name.status, by_name.stdout) == ("passed", "3\n")


def test_bad_arguments_raise() -> None:
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        execute("pass", timeout_s=1, backend="docker")  # type: ignore[arg-type]
    with pytest.raises(SandboxError, match="timeout_s"):
        execute("pass", timeout_s=0)
    with pytest.raises(SandboxError, match="escapes"):
        execute("pass", timeout_s=1, files={"../x": ""})


ISOLATING = [b for b in BACKENDS if b != "rlimit-only"]


@pytest.mark.parametrize("ns_backend", ISOLATING)
def test_interpreter_under_tmp_is_visible(ns_backend: str) -> None:
    """The private /tmp used to hide an interpreter installed under the host's /tmp (every run an
    `error`); the allow-list binds the interpreter's own path wherever it is."""
    hidden = tempfile.mkdtemp(prefix="sg-under-tmp-", dir="/tmp")
    link = os.path.join(hidden, "python3")
    try:
        os.symlink(sys.executable, link)
        r = execute("import sys\nprint(sys.executable)", timeout_s=10, backend=ns_backend, python=link)
    finally:
        os.unlink(link)
        os.rmdir(hidden)
    assert (r.status, r.stdout) == ("passed", link + "\n"), r
    assert r.view == sandbox.VIEW_VERSION


@pytest.mark.parametrize("ns_backend", ISOLATING)
def test_a_wrapper_script_runs_the_interpreter_it_names(ns_backend: str, tmp_path) -> None:
    """A shim (pyenv's, a module system's) is not what runs inside: the interpreter reports its
    own sys.executable, and that is what the view shows and the sandbox runs."""
    shim = tmp_path / "python3"
    shim.write_text(f"#!/bin/sh\nexec {os.path.realpath(sys.executable)} \"$@\"\n")
    shim.chmod(0o755)
    r = execute("import sys\nprint(sys.executable)", timeout_s=10, backend=ns_backend, python=str(shim))
    assert (r.status, r.stdout) == ("passed", os.path.realpath(sys.executable) + "\n"), r


@pytest.mark.parametrize("ns_backend", ISOLATING)
def test_sandbox_tool_failure_is_an_error(ns_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A view whose mount cannot be made (its source is gone): bwrap or the unshare script fails
    before the interpreter starts, which is the sandbox's failure (`error`), not the program's."""
    real = _view.interpreter_view(os.path.realpath(sys.executable))
    broken = dataclasses.replace(real, ops=(_view.Op("ro-bind", "/opt/sg-gone", "/nonexistent/sg-gone"),
                                            *real.ops))
    monkeypatch.setattr(sandbox, "interpreter_view", lambda python: broken)
    r = execute("print(1)", timeout_s=10, backend=ns_backend)
    assert r.status == "error" and "before the program started" in r.detail, r
    assert r.stdout == ""


# --- the parallel scorer -------------------------------------------------------------------------


def test_run_many_keeps_input_order_and_runs_in_parallel() -> None:
    # later programs finish first; each prints when it ran so overlap is checked, not speed
    progs = [f"import time\nt = time.time()\ntime.sleep({0.6 - 0.2 * i})\nprint({i}, t, time.time())"
             for i in range(3)]
    seen: list[int] = []
    results = run_many(progs, timeout_s=10, workers=3, on_result=lambda i, r: seen.append(i))
    assert [r.stdout.split()[0] for r in results] == ["0", "1", "2"]
    assert all(r.status == "passed" and r.attempts == 1 for r in results)
    assert sorted(seen) == [0, 1, 2]
    spans = [tuple(map(float, r.stdout.split()[1:])) for r in results]
    assert max(s for s, _ in spans) < min(e for _, e in spans), "no two programs overlapped"


def test_run_many_jobs_carry_files_and_stdin() -> None:
    jobs = [SandboxJob("print(open('x').read() + input())", files={"x": "a"}, stdin="b\n"), "print('c')"]
    results = run_many(jobs, timeout_s=10, workers=2)
    assert [r.stdout for r in results] == ["ab\n", "c\n"]


def test_run_many_retries_errors_only() -> None:
    results = run_many(["print(1)", "raise SystemExit(2)"], timeout_s=10, workers=2, retries=2,
                       retry_backoff_s=0.01, python="/nonexistent/python3")
    assert [(r.status, r.attempts) for r in results] == [("error", 3), ("error", 3)]
    ok = run_many(["raise SystemExit(2)"], timeout_s=10, workers=1, retries=2)
    assert [(r.status, r.attempts) for r in ok] == [("failed", 1)]
    assert run_many([], timeout_s=1, workers=2) == []
    with pytest.raises(SandboxError, match="workers"):
        run_many(["pass"], timeout_s=1, workers=0)
