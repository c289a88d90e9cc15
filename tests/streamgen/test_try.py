"""`python -m streamgen.try_request`: the report of one request, and one clear error (exit 2) for bad input."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from streamgen import try_request as try_cli

REQUEST = "Write a Python function that adds two numbers. It should handle floats too. Return the sum."


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = try_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_report_shows_segments_steps_costs_and_speedups(capsys) -> None:
    code, out, err = run(capsys, REQUEST, "model=tiny-qwen3", "max_new_tokens=6")
    assert code == 0, err
    assert "segments (3):" in out and "'It should handle floats too. '" in out
    rows = [line.split() for line in out.splitlines() if line[:4].strip() in ("1", "2", "3")]
    assert [r[0] for r in rows] == ["1", "2", "3"] and rows[0][1] == "0"  # first step has no draft
    assert all(1 <= int(r[4]) <= 6 for r in rows)  # forwards
    assert "base:" in out and "residual:" in out and "speculative:" in out
    assert "x forwards" in out and "x wall clock" in out
    assert "stream answer == base answer: yes" in out


def test_threshold_acceptance_runs(capsys) -> None:
    code, out, _ = run(capsys, REQUEST, "model=tiny-gemma3", "acceptance=threshold", "tau=0", "max_new_tokens=5")
    assert code == 0 and "acceptance threshold τ=0," in out  # the rule's label (streamgen.acceptance_rules)
    assert "residual:       1 forwards" in out  # tau=0 keeps every (complete) draft


@pytest.mark.parametrize("argv,message", [
    (["", "model=tiny-llama"], "request is empty"),
    (["model=tiny-llama"], "give the request as the first argument"),
    ([], "give the request as the first argument"),
    ([REQUEST, "model=no-such-model"], "known are .*smollm2"),
    ([REQUEST, "model"], "malformed override 'model': write key=value"),
    ([REQUEST, "nonsense_key=1"], "nonsense_key"),
    ([REQUEST, "acceptance=threshold", "tau=1.5"], r"tau=1.5 is outside \[0, 1\]"),
    ([REQUEST, "acceptance=threshold", "tau=-0.1"], r"outside \[0, 1\]"),
    ([REQUEST, "acceptance=threshold"], "needs tau="),
    ([REQUEST, "acceptance=sampling"], "use acceptance=greedy"),
    (["word " * 5000 + ". More.", "model=tiny-llama"], "shorter request.*more context"),
])
def test_bad_input_is_one_clear_error_with_exit_2(capsys, argv, message) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback" not in err and err.startswith("error: ")
    assert re.search(message, err), err


@pytest.mark.slow
def test_module_entry_point_runs_as_a_subprocess() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    ok = subprocess.run([sys.executable, "-m", "streamgen.try_request", "One. Two.", "model=tiny-llama", "max_new_tokens=3"],
                        capture_output=True, text=True, timeout=300, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "segments (2):" in ok.stdout and "speedup:" in ok.stdout
