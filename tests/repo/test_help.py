"""Every command the README names answers ``--help`` with its usage and exit 0, running nothing.

A newcomer's first try is ``--help``: it must not be read as an override (the demo said "malformed
override '--help'", exit 2) nor as a request to decode (try_request loaded SmolLM2 and streamed "--help").
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamgen.config import REPO_ROOT

COMMANDS = {  # command → a phrase of its own usage text
    ("-m", "streamgen.demo"): "python -m streamgen.demo",
    ("-m", "streamgen.try_request"): "python -m streamgen.try_request",
    ("-m", "streamgen.benchmarks"): "usage:",
    ("-m", "analysis.report"): "usage:",
    ("-m", "analysis.simulate"): "usage:",
    ("-m", "analysis.view"): "usage:",
    ("-m", "analysis.rescore"): "analysis.rescore",
    ("-m", "analysis.compact"): "analysis.compact",
    ("-m", "analysis.probe_report"): "usage:",
    ("workflows/full_grid.py",): "full_grid.py",
    ("workflows/nightly.py",): "nightly",
    ("workflows/adapt.py",): "adapt",
    ("workflows/verifier_probe.py",): "workflows/verifier_probe.py",
}


@pytest.mark.parametrize("command", list(COMMANDS), ids=lambda c: c[-1])
def test_help_prints_the_usage_and_exits_0(command: tuple[str, ...]) -> None:
    proc = subprocess.run([sys.executable, *command, "--help"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert COMMANDS[command] in proc.stdout
    assert "model smollm2" not in proc.stdout and "Loading weights" not in proc.stderr  # nothing was run
