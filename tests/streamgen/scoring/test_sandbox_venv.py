"""The scorer's interpreter is visible to programs wherever it is installed: here, a virtual
environment under /tmp (which the sandbox's private /tmp used to hide, so every answer was an
`error` and `check` still exited 0). Marked `slow`: building the venv takes ~10-20 s.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamgen.config import REPO_ROOT, default_data_dir
from streamgen.scoring import sandbox

pytestmark = pytest.mark.slow
ISOLATING = [b for b in sandbox.available_backends() if b != "rlimit-only"]


@pytest.fixture(scope="module")
def tmp_venv() -> Iterator[Path]:
    """The project installed (editable, no dependencies: the system's are visible) into a fresh venv
    under the host's /tmp. Without pip of its own (the venv's bundled setuptools 65 cannot build an
    editable wheel offline); the system's pip installs into it."""
    root = Path(tempfile.mkdtemp(prefix="sg-venv-", dir="/tmp"))
    venv = root / "venv"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                       check=True, timeout=120)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                        "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "-e", str(REPO_ROOT)],
                       check=True, timeout=300, capture_output=True)
        yield venv
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _in_venv(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # cwd outside the checkout: streamgen is imported as installed in the venv, not from cwd
    return subprocess.run([str(venv / "bin" / "python"), *args], capture_output=True, text=True,
                          timeout=600, cwd=venv.parent)


@pytest.mark.parametrize("backend", ISOLATING)
def test_programs_run_by_the_venv_interpreter(tmp_venv: Path, backend: str) -> None:
    code = ("from streamgen.scoring.sandbox import execute\n"
            f"r = execute('import sys; print(sys.prefix, sys.executable)', timeout_s=30, backend={backend!r})\n"
            "print(r.status, r.view, r.stdout.strip(), r.detail)")
    res = _in_venv(tmp_venv, "-c", code)
    assert res.returncode == 0, res.stderr
    python = tmp_venv / "bin" / "python"
    assert res.stdout.split() == ["passed", sandbox.VIEW_VERSION, str(tmp_venv), str(python)], res.stdout


@pytest.mark.parametrize("backend", ISOLATING)
@pytest.mark.parametrize(("bench_name", "limit"), [("humaneval", 6), ("mbpp", 6)])
def test_references_pass_through_the_venv(tmp_venv: Path, backend: str, bench_name: str, limit: int) -> None:
    if not default_data_dir().is_dir():
        pytest.skip(f"no benchmark data at {default_data_dir()}")
    res = _in_venv(tmp_venv, "-m", "streamgen.benchmarks", "check", bench_name, f"options.sandbox_backend={backend}",
                   "--limit", str(limit), "--data-dir", str(default_data_dir()))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{limit}/{limit} pass (passed {limit}; 0 known failures)" in res.stdout, res.stdout
    view_log = [line for line in res.stderr.splitlines() if "sandbox view for" in line]
    assert view_log and str(tmp_venv) in view_log[0], res.stderr  # the venv itself is allow-listed
