"""The suite watches its own time: every run can end with its slowest tests, its wall and test time, a
comparison with a stored earlier run, and a loud warning past a stated budget (docs/testing.md).

Options (``.ci/run`` sets all four)::

    --test-times FILE            write one line per test: seconds, outcome, test id (TSV, sorted by id)
    --test-times-reference FILE  an earlier run's FILE: each slow test's time then, tests added or gone
    --suite-budget SECONDS       warn loudly when the run's wall time exceeds it
    --slowest N                  how many of the slowest tests to list (default 25)

Works with and without pytest-xdist: reports reach the controller, which alone writes and prints. A
test's time is its setup + call + teardown (a module fixture's cost lands on the test that paid it).
Ids are pytest's node ids without xdist's ``@group`` suffix, so runs with and without groups compare.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class Timing:
    seconds: float = 0.0
    outcome: str = "passed"


@dataclass
class SuiteClock:
    started: float = field(default_factory=time.monotonic)
    tests: dict[str, Timing] = field(default_factory=dict)

    def record(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(plain_id(report.nodeid), Timing())
        entry.seconds += report.duration
        if report.when == "call" and report.outcome != "passed":
            entry.outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        elif report.outcome == "skipped" and entry.outcome == "passed":
            entry.outcome = "skipped"
        elif report.outcome == "failed":
            entry.outcome = "error" if entry.outcome == "passed" else entry.outcome


def plain_id(nodeid: str) -> str:
    """A node id without xdist's group suffix (``path::name[param]@group`` → ``path::name[param]``)."""
    head, bracket, tail = nodeid.rpartition("]")  # a parameter may hold '@' itself
    return head + bracket + tail.split("@", 1)[0]


def read_times(path: Path) -> dict[str, Timing]:
    """A file written by --test-times: ``seconds<TAB>outcome<TAB>test id`` per line."""
    out = {}
    for line in path.read_text().splitlines():
        seconds, outcome, nodeid = line.split("\t", 2)
        out[nodeid] = Timing(float(seconds), outcome)
    return out


def write_times(path: Path, tests: dict[str, Timing]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{t.seconds:.2f}\t{t.outcome}\t{i}\n" for i, t in sorted(tests.items())))
    tmp.replace(path)


def summary_lines(tests: dict[str, Timing], wall_s: float, slowest: int, budget_s: float | None,
                  reference: dict[str, Timing] | None) -> list[str]:
    """What the run prints at its end (also a pure function, tested in tests/repo/test_suite_clock.py)."""
    total = sum(t.seconds for t in tests.values())
    lines = [f"wall {wall_s:.0f} s, test time {total:.0f} s over {len(tests)} tests"
             + (f"; budget {budget_s:.0f} s of wall" if budget_s is not None else "")]
    if reference is not None:
        ref_total = sum(t.seconds for t in reference.values())
        gone = sorted(set(reference) - set(tests))
        new = sorted(set(tests) - set(reference))
        lines.append(f"reference: test time {ref_total:.0f} s over {len(reference)} tests; "
                     f"{len(new)} tests new, {len(gone)} gone" + (f" (gone: {', '.join(gone[:5])}"
                                                                   f"{' …' if len(gone) > 5 else ''})" if gone else ""))
    lines.append(f"{slowest} slowest (seconds{', reference' if reference is not None else ''}):")
    for nodeid, t in sorted(tests.items(), key=lambda kv: (-kv[1].seconds, kv[0]))[:slowest]:
        ref = reference.get(nodeid) if reference is not None else None
        then = "" if reference is None else (f" ({ref.seconds:7.1f})" if ref else " (    new)")
        lines.append(f"  {t.seconds:7.1f}{then}  {nodeid}")
    if budget_s is not None and wall_s > budget_s:
        bar = "!" * 100
        lines += [bar, f"WARNING: the suite took {wall_s:.0f} s of wall, over its budget of {budget_s:.0f} s "
                       f"({wall_s / budget_s:.0%}). CI's hard limit is 90 minutes for install and tests: find "
                       "what grew in the list above (docs/testing.md, 'Time').", bar]
    return lines


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("suite clock", "the suite's own time (tests/support/suite_clock.py)")
    group.addoption("--test-times", type=Path, help="write each test's seconds, outcome and id here (TSV)")
    group.addoption("--test-times-reference", type=Path, help="an earlier --test-times file to compare with")
    group.addoption("--suite-budget", type=float, help="warn loudly past this many seconds of wall")
    group.addoption("--slowest", type=int, default=25, help="how many slowest tests to list (default 25)")


class SuiteClockPlugin:
    """Registered on the controller only (under xdist the workers forward their reports to it)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.clock = SuiteClock()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.clock.record(report)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        opt = self.config.getoption
        wall = time.monotonic() - self.clock.started
        if opt("test_times") is not None:
            write_times(opt("test_times"), self.clock.tests)
        ref_path = opt("test_times_reference")
        reference = read_times(ref_path) if ref_path is not None and ref_path.is_file() else None
        terminalreporter.section("suite clock")
        for line in summary_lines(self.clock.tests, wall, opt("slowest"), opt("suite_budget"), reference):
            terminalreporter.write_line(line)
        if ref_path is not None and reference is None:
            terminalreporter.write_line(f"(no reference at {ref_path}: nothing compared)")


def pytest_configure(config: pytest.Config) -> None:
    on_controller = not hasattr(config, "workerinput")
    wanted = any(config.getoption(o) is not None for o in ("test_times", "test_times_reference", "suite_budget"))
    if on_controller and wanted:
        config.pluginmanager.register(SuiteClockPlugin(config), "suite_clock_plugin")
