"""The suite's own clock (tests/support/suite_clock.py): each test's time and outcome written once, the slowest
listed against an earlier run, a loud warning past the budget; with and without pytest-xdist."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.suite_clock import Timing, plain_id, read_times, summary_lines, write_times

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parents[2]

# A designed suite: its outcomes and the least time each test takes are known from the code.
SUITE = '''
import time, pytest

@pytest.fixture
def broken():
    raise RuntimeError("setup fails")

@pytest.fixture
def slow_teardown():
    yield
    time.sleep(0.2)

def test_slow():
    time.sleep(0.3)

def test_fails():
    assert False

def test_skipped():
    pytest.skip("designed")

def test_setup_error(broken):
    pass

def test_teardown_counts(slow_teardown):
    pass

@pytest.mark.parametrize("x", ["a@b", "c"])
def test_param(x):
    pass
'''


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Timing]]:
    pytester.makepyfile(test_designed=SUITE)
    out = pytester.path / "times.tsv"
    result = pytester.runpytest_subprocess("-p", "tests.support.suite_clock", "-p", "no:cacheprovider",
                                           f"--test-times={out}", "--suite-budget=0.01", "--slowest=3", *args)
    return result, read_times(out)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_each_test_written_once_with_its_outcome_and_time(pytester: pytest.Pytester, workers: list[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    result, times = _run(pytester, *workers)
    assert times.keys() == {f"test_designed.py::{n}" for n in (
        "test_slow", "test_fails", "test_skipped", "test_setup_error", "test_teardown_counts",
        "test_param[a@b]", "test_param[c]")}  # no '@group' suffix, a parameter's '@' kept
    want = {"test_slow": "passed", "test_fails": "failed", "test_skipped": "skipped",
            "test_setup_error": "error", "test_teardown_counts": "passed", "test_param[c]": "passed"}
    assert {k.split("::")[1]: v.outcome for k, v in times.items() if "a@b" not in k} == want
    assert times["test_designed.py::test_slow"].seconds >= 0.3
    assert times["test_designed.py::test_teardown_counts"].seconds >= 0.2  # teardown is the test's time
    text = result.stdout.str()
    assert "suite clock" in text and "3 slowest" in text
    slowest = text.split("3 slowest")[1].splitlines()[1:4]
    assert [line.split()[-1] for line in slowest[:2]] == ["test_designed.py::test_slow",
                                                          "test_designed.py::test_teardown_counts"]
    assert "WARNING: the suite took" in text and "over its budget of 0 s" in text


def test_summary_against_a_reference() -> None:
    now = {"a": Timing(10.0), "b": Timing(3.0), "new": Timing(1.0, "failed")}
    ref = {"a": Timing(4.0), "b": Timing(3.5), "gone": Timing(2.0)}
    lines = summary_lines(now, wall_s=20.0, slowest=2, budget_s=30.0, reference=ref)
    assert lines[0] == "wall 20 s, test time 14 s over 3 tests; budget 30 s of wall"
    assert lines[1] == "reference: test time 10 s over 3 tests; 1 tests new, 1 gone (gone: gone)"
    assert lines[3:] == ["     10.0 (    4.0)  a", "      3.0 (    3.5)  b"]  # the 2 slowest, each with its time then
    assert not any("WARNING" in line for line in lines)  # 20 s of wall is within 30
    over = summary_lines(now, wall_s=31.0, slowest=1, budget_s=30.0, reference=None)
    assert any(line.startswith("WARNING: the suite took 31 s of wall, over its budget of 30 s (103%)") for line in over)


def test_times_file_round_trip_and_ids(tmp_path: Path) -> None:
    tests = {"t.py::x[p@q]": Timing(1.234, "passed"), "t.py::y": Timing(0.0, "skipped")}
    write_times(tmp_path / "t.tsv", tests)
    assert (tmp_path / "t.tsv").read_text() == "1.23\tpassed\tt.py::x[p@q]\n0.00\tskipped\tt.py::y\n"
    assert read_times(tmp_path / "t.tsv") == {"t.py::x[p@q]": Timing(1.23, "passed"),
                                               "t.py::y": Timing(0.0, "skipped")}
    assert plain_id("t.py::y@machine") == "t.py::y" and plain_id("t.py::x[p@q]@g") == "t.py::x[p@q]"
    assert plain_id("t.py::x[p@q]") == "t.py::x[p@q]"
