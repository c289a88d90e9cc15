"""Nightly regression check: run the fixed grid (configs/grid/nightly.yaml) fresh and compare it with
the stored baseline (baselines/nightly.json). Exit 0: no cell moved; 1: regression (the markdown
report names the moved cells); 2: configuration or baseline problem.

Local (default; a couple of minutes on CPU)::

    python workflows/nightly.py
    python workflows/nightly.py --report nightly.md        # also copy the report there
    python workflows/nightly.py --dry-run                  # validate + the plan and an estimate; run nothing

Debug / Slurm (the same grid through submitit; in-process, or one Slurm job)::

    python workflows/nightly.py cluster=debug
    python workflows/nightly.py cluster=slurm_test

Compare a run directory that already exists (no run)::

    python workflows/nightly.py --compare results/nightly/20261130T020000Z

The nightly also runs the reference sweeps that the default test run only samples (DS-1000's 1000
gold answers through its sandbox, ~12 minutes on 2 cores; streamgen.benchmarks.check.SAMPLED_IN_TESTS)::

    python workflows/nightly.py --no-references            # the grid alone

Refresh the baseline, deliberately (3 fresh runs; tolerances from their spread), then commit it::

    python workflows/nightly.py --update-baseline [--runs 3]

Schedule it with cron (``30 2 * * * cd /path/to/streamgen && python workflows/nightly.py``) or Slurm
(``sbatch --begin=02:30 --wrap "python workflows/nightly.py cluster=local"``); see docs/cluster.md.
Other ``key=value`` arguments override fields of the nightly grid (``streamgen.config.GridConfig``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not another install

from analysis import BaselineError, baseline_from_runs, read_baseline, regression_check, write_baseline  # noqa: E402
from jobs.cluster.executors import run_grid_on_cluster  # noqa: E402
from streamgen.config import REPO_ROOT, ConfigError, GridConfig, grid_config, to_yaml  # noqa: E402
from streamgen.results.version import code_version  # noqa: E402

log = logging.getLogger("nightly")
BASELINE = REPO_ROOT / "baselines" / "nightly.json"
PERTURB_ENV = "STREAMGEN_TEST_PERTURB"  # tests/support/perturb/sitecustomize.py; see docs/cluster.md


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="key=value overrides of the nightly grid")
    p.add_argument("--baseline", type=Path, default=BASELINE)
    p.add_argument("--compare", type=Path, help="compare this existing run directory instead of running")
    p.add_argument("--update-baseline", action="store_true", help="deliberately rewrite the baseline")
    p.add_argument("--runs", type=int, default=3, help="fresh runs for --update-baseline (tolerances)")
    p.add_argument("--report", type=Path, help="also write the markdown report here")
    p.add_argument("--dry-run", action="store_true", help="validate, print the plan and an estimate; run nothing")
    p.add_argument("--no-references", action="store_true",
                   help="skip the full reference sweeps that the default test run samples (DS-1000)")
    return p.parse_args(argv)


def fresh_run(grid: GridConfig) -> Path:
    """Run the grid into a new ``<results_dir>/<UTC time>/`` (never resume: the nightly recomputes)."""
    out = Path(grid.results_dir) / f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}"
    summary = run_grid_on_cluster(dataclasses.replace(grid, results_dir=str(out)))
    if getattr(summary, "shards_failed", None):  # their examples are missing: the comparison names them
        log.error("%d shard(s) failed: %s; see the log above", len(summary.shards_failed), summary.shards_failed)
    return out


def update_baseline(grid: GridConfig, args: argparse.Namespace) -> int:
    if os.environ.get(PERTURB_ENV):
        print(f"error: {PERTURB_ENV} is set: refusing to write a baseline from a perturbed decoder", file=sys.stderr)
        return 2
    runs = (fresh_run(grid) for _ in range(args.runs))  # each run summarised before the next starts
    baseline = baseline_from_runs(runs, grid_yaml=to_yaml(grid), code_version=code_version())
    path = write_baseline(baseline, args.baseline)
    print(f"wrote {path}: {len(baseline['cells'])} cells, {len(baseline['examples'])} examples from "
          f"{args.runs} runs; review `git diff {path}` and commit it with the change that explains it")
    return 0


def check(grid: GridConfig, args: argparse.Namespace) -> int:
    baseline = read_baseline(args.baseline)  # fail before running when there is none
    run_dir = args.compare or fresh_run(grid)
    passed, report = regression_check(baseline, run_dir, code_version=code_version())
    (Path(run_dir) / "nightly_report.md").write_text(report)
    if args.report:
        args.report.write_text(report)
    print(report)
    refs_ok = args.compare is not None or args.no_references or reference_sweeps()
    return 0 if passed and refs_ok else 1


def reference_sweeps() -> bool:
    """Every reference of the sweeps the test run samples, through the sandbox; one line each."""
    from streamgen.benchmarks import load_benchmark
    from streamgen.benchmarks.check import full_sweeps
    from streamgen.config import benchmark_config

    reports = full_sweeps(lambda name: load_benchmark(benchmark_config(name)))
    for r in reports:
        print(f"reference sweep: {r.line()}")
    return all(r.ok for r in reports)


def dry_run(grid: GridConfig, args: argparse.Namespace) -> int:
    """Validate the grid, the cluster and (unless refreshing it) the baseline; print the plan."""
    from jobs.cluster.dry_run import plan_dry_run

    if not args.update_baseline:
        read_baseline(args.baseline)
    # each run writes a fresh <results_dir>/<UTC time>/; earlier runs below results_dir fit the estimate
    print(plan_dry_run(grid, results_dir=Path(grid.results_dir) / "<next run>", fit_on=grid.results_dir))
    return 0


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("streamgen").setLevel(logging.WARNING)
    args = parse_args(argv)
    from jobs.run.stop_signals import RunInterrupted, ending
    from streamgen.results.results_dir import ResultsDirError

    try:
        grid = grid_config("nightly", args.overrides)
        if args.dry_run:
            return dry_run(grid, args)
        return update_baseline(grid, args) if args.update_baseline else check(grid, args)
    except (ConfigError, BaselineError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ResultsDirError, RunInterrupted) as exc:  # disk full, read-only, locked; SIGTERM/SIGINT
        line, code = ending(exc)
        print(line, file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
