"""The package type-checks: ``mypy jobs streamgen analysis workflows`` reports no error (pyproject's
[tool.mypy] settings). Run in a subprocess with its own cache directory, so it checks this tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["jobs", "streamgen", "analysis", "workflows"]


def test_mypy_reports_no_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), *PACKAGES],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    # "No module named mypy": install the dev extra (pip install -e '.[dev]'), as the README's test command does
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout
