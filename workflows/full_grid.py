"""Run a grid of (model × benchmark × acceptance/τ × example) and print the summary tables.

Local (the embedded default: loopback Ray, CPU, offline SmolLM2, one example of each of 6 benchmarks, 192 tokens)::

    python workflows/full_grid.py
    python workflows/full_grid.py grid=smoke results_dir=/tmp/smoke       # tiny model, < 2 minutes
    python workflows/full_grid.py limit=5 taus=[0.5,0.9] workers=2 models=[smollm2] benchmarks=[mbpp,chat]
    python workflows/full_grid.py grid=smoke --dry-run   # validate, print the plan and an estimate; start nothing
    python workflows/full_grid.py grid=smoke --dry-run --calibrate   # ... and the estimate with seconds measured here
    python workflows/full_grid.py grid=smoke --calibrate=cal.json    # calibrate (or read cal.json), print, then run
    python workflows/full_grid.py grid=smoke --dry-run --calibrate --pilot=2   # the pilot decodes 2 examples per unit kind (0: none)

Debug (the same driver through submitit's in-process DebugExecutor; breakpoints work)::

    python workflows/full_grid.py cluster=debug grid=smoke

Slurm (one job; Ray starts inside the allocation; preemption requeues and resumes)::

    python workflows/full_grid.py cluster=slurm_a100 grid=full     # the study; or cluster=slurm_a6000
    python workflows/full_grid.py cluster=slurm_test grid=smoke    # the test cluster of .ci/slurm.sh

Arguments are ``grid=NAME`` (``configs/grid/NAME.yaml``, default ``local``) and ``key=value``
overrides of its fields (``streamgen.config.GridConfig``). Rerunning the same command resumes: finished
shards are kept, missing or damaged ones are computed. Results: ``<results_dir>/{pairs,steps,runs}``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

# Run as a script, Python puts workflows/ on the path, not the checkout: add the checkout so this
# clone's packages are imported (not another install of streamgen).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamgen.config import ConfigError, GridConfig, grid_config  # noqa: E402

log = logging.getLogger("full_grid")


def parse_args(argv: Sequence[str]) -> tuple[str, list[str]]:
    """``grid=NAME`` picks the grid file; every other ``key=value`` overrides one of its fields
    (``--dry-run`` is read by :func:`main`)."""
    name, overrides = "local", []
    for arg in argv:
        if arg in ("-h", "--help"):
            print(__doc__)
            raise SystemExit(0)
        if arg == "--dry-run" or arg == "--calibrate" or arg.startswith(("--calibrate=", "--pilot=")):
            continue
        if arg.startswith("grid="):
            name = arg.split("=", 1)[1]
        else:
            overrides.append(arg)
    return name, overrides


def print_summary(summary: object, grid: GridConfig) -> None:
    from analysis import print_summary as print_tables

    t = getattr(summary, "timings", None)
    if t is not None:
        s = summary
        print(f"run {s.run_id}: {s.shards_done} shards computed, {s.shards_skipped} already done, "  # type: ignore[attr-defined]
              f"{len(s.shards_failed)} failed; {s.examples} examples ({s.errors} errors, "  # type: ignore[attr-defined]
              f"{s.excluded} excluded) in {s.wall_s:.0f} s")  # type: ignore[attr-defined]
        if resumed := getattr(s, "examples_resumed", 0):
            print(f"{resumed} examples taken from the spools of units killed mid-way, not decoded again (docs/grid.md)")
        print(f"time: ray start {t.ray_start_s:.1f} s, model load {t.load_s:.1f} s, decode {t.decode_s:.1f} s "
              f"({t.forward_s:.1f} s in forwards, {t.decode_cpu_s:.1f} s CPU), scoring {t.score_s:.1f} s, writing {t.write_s:.2f} s")
    print(budget_line(grid))
    print_tables(grid.results_dir)


def budget_line(grid: GridConfig) -> str:
    """How many base answers of this grid's models and benchmarks in ``results_dir`` ended before their
    answer budget (``analysis/sql/answer_budget.sql``); a budget every answer fills makes the speedups
    describe the budget, not streaming (docs/experiments.md)."""
    from analysis import budget_line as answer_budget_line

    return answer_budget_line(grid.results_dir, grid.models, grid.benchmarks)


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("streamgen").setLevel(logging.WARNING)
    name, overrides = parse_args(argv)
    from jobs.run.driver import GridAborted
    from jobs.run.stop_signals import RunInterrupted, ending
    from streamgen.results.results_dir import ResultsDirError, describe_os_error

    calibrate = next((a.partition("=")[2] for a in argv if a == "--calibrate" or a.startswith("--calibrate=")), None)
    pilot_arg = next((a.partition("=")[2] for a in argv if a.startswith("--pilot=")), "1")
    if not pilot_arg.isdigit():
        print(f"error: --pilot={pilot_arg}: give the examples the pilot decodes per unit kind as a whole number "
              "(--pilot=0: no pilot)", file=sys.stderr)
        return 2
    pilot = int(pilot_arg)
    try:
        grid = grid_config(name, overrides)
        cal_path = None
        if calibrate is not None:
            from jobs.cluster.dry_run import calibration_path

            cal_path = calibration_path(grid, calibrate)
        if "--dry-run" in argv:
            from jobs.cluster.dry_run import dry_run_report
            from streamgen.config import raise_if_problems

            text, problems = dry_run_report(grid, calibrate=cal_path, pilot=pilot)
            print(text)  # the plan and its estimate, also when the pre-flight fails
            raise_if_problems(problems, f"grid {grid.name!r} cannot run")
            return 0
        if cal_path is not None:  # before a real run: calibrate here, print both estimates, then run
            from jobs.cluster.dry_run import dry_run_report

            text, _ = dry_run_report(grid, calibrate=cal_path, pilot=pilot)
            print(text.split("\n\n")[-1], flush=True)
        from jobs.cluster.executors import run_grid_on_cluster

        summary = run_grid_on_cluster(grid)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except GridAborted as exc:
        print(f"aborted: {exc}", file=sys.stderr)
        return 1
    except (ResultsDirError, RunInterrupted) as exc:  # disk full, read-only, locked; SIGTERM/SIGINT
        line, code = ending(exc)
        print(line, file=sys.stderr)
        return code
    except OSError as exc:  # outside the results directory (e.g. data_dir): still one line, no traceback
        print(f"error: {describe_os_error(exc, doing='accessing')}", file=sys.stderr)
        return 1
    print_summary(summary, grid)
    failed = getattr(summary, "shards_failed", [])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
