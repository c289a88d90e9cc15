"""bench/bench_grid.py's CPU seconds per process: a child that burns CPU is attributed, by its label."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.bench_grid import CpuByProcess, _label

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\ntime.sleep(0.6)\n"


def test_a_busy_child_is_counted_under_its_label(tmp_path) -> None:
    script = tmp_path / "burner.py"
    script.write_text(BURN.format(s=0.8))
    with CpuByProcess(interval_s=0.1) as cpu:
        subprocess.run([sys.executable, str(script)], check=True)
        time.sleep(0.1)
    seconds = cpu.seconds()
    assert 0.6 <= seconds["burner.py"] <= 1.5, seconds  # 0.8 s burnt + interpreter start, sampled while asleep
    assert seconds["driver (this process)"] < 0.5, seconds  # this process waited


def test_labels() -> None:
    assert _label(["ray::ModelActor.run_unit", ""]) == "ray::ModelActor"
    assert _label(["ray::IDLE"]) == "ray::IDLE"
    assert _label(["/usr/bin/python", "-u", "/x/ray/_private/log_monitor.py", "--a"]) == "log_monitor.py"
    assert _label(["/x/raylet", "--socket"]) == "raylet"
    assert _label([]) == "?"



def test_a_process_whose_cmdline_is_gone_keeps_its_label() -> None:
    """A process being torn down (a killed actor) reads with an empty cmdline for its last samples: its
    CPU seconds stay under the label it had while it ran, not under "?" (seen: "? 77.0" for an actor)."""
    cpu = CpuByProcess()
    cpu._record(11, _label(["ray::ModelActor.run_unit"]), 1.0)
    cpu._record(11, _label([]), 77.0)
    cpu._record(12, _label([]), 0.5)  # never seen with a cmdline: nothing better than "?"
    assert cpu.seconds() == {"ray::ModelActor": 77.0, "?": 0.5}


def test_from_now_counts_a_running_process_from_the_first_sample(tmp_path) -> None:
    """bench/bench_ray_idle.py measures daemons started before it: with ``from_now`` a child's CPU
    before the first sample is not counted, only what it burns afterwards (here: while it sleeps)."""
    script, burnt, stop = tmp_path / "early.py", tmp_path / "burnt", tmp_path / "stop"
    # burn 0.6 s, say so, then idle (polling, a few ms of CPU) until told to stop: the samples below are
    # taken after the burn however slowly the loaded machine starts the child
    script.write_text(BURN.format(s=0.6).replace("time.sleep(0.6)\n", "")
                      + f"open({str(burnt)!r}, 'w').close()\n"
                      + f"import os\nwhile not os.path.exists({str(stop)!r}): time.sleep(0.05)\n")
    child = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 120
        while not burnt.exists():  # interpreter start + 0.6 s burnt: all before the first sample
            assert child.poll() is None and time.monotonic() < deadline, "the child did not finish its burn"
            time.sleep(0.05)
        with CpuByProcess(interval_s=5.0, from_now=True) as cpu:
            time.sleep(0.3)
        before_now = CpuByProcess(interval_s=5.0)  # the grid's default: children count from their start
        with before_now:
            time.sleep(0.1)
    finally:
        stop.touch()
        child.wait(timeout=60)
    assert cpu.seconds()["early.py"] < 0.2, cpu.seconds()
    assert before_now.seconds()["early.py"] >= 0.5, before_now.seconds()


def test_equal_cpu_ratio_takes_out_the_machine_speed_and_keeps_what_the_grid_adds() -> None:
    """Two runs of the same 100 examples: the 2-actor run's actors needed 10 % more CPU (the machine was
    slower then) and its wall is 60 s against 100 s. End to end 100/60; at equal CPU ×1.1."""
    from bench.bench_grid import equal_cpu_ratio
    from jobs.run.driver import GridSummary, Timings

    def run(wall_s: float, cpu_s: float, examples: int = 100) -> GridSummary:
        return GridSummary("r", Path("."), 4, 0, examples=examples, wall_s=wall_s,
                           timings=Timings(decode_cpu_s=cpu_s))

    assert equal_cpu_ratio(run(100.0, 90.0), run(60.0, 99.0)) == pytest.approx((100 / 60) * (99 / 90))
    # per example: a 2-actor run of twice the examples at twice the CPU has the same CPU per example
    assert equal_cpu_ratio(run(100.0, 90.0), run(120.0, 180.0, examples=200)) == pytest.approx(100 / 60)
