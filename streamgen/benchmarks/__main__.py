"""Benchmark checks from the command line.

    python -m streamgen.benchmarks check humaneval                 # every reference through the scorer
    python -m streamgen.benchmarks check mbpp --workers 2 --limit 50
    python -m streamgen.benchmarks check canitedit options.instruction=lazy
    python -m streamgen.benchmarks check ds1000 options.sandbox_backend=unshare
    python -m streamgen.benchmarks stats                           # segmentation table, all benchmarks
    python -m streamgen.benchmarks verify                          # every data file against MANIFEST.tsv

``key=value`` arguments override the benchmark's YAML (as for the grid); ``--data-dir`` (or
``STREAMGEN_DATA_DIR``) points at the benchmark data. ``check`` exits 1 unless every reference
passes, except those the YAML declares in ``options.known_failures`` (and none may end in a
sandbox ``error``); one declared in ``options.load_sensitive`` that fails is run again alone (up to
3 times) first; ``--expect N`` also fails it below N passes.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from streamgen.benchmarks import load_benchmark
from streamgen.benchmarks.check import check_references
from streamgen.benchmarks.data_manifest import MANIFEST_NAME, read_manifest, verify_directory
from streamgen.benchmarks.stats import markdown_table, segmentation_stats
from streamgen.config import available, benchmark_config, resolve_data_dir


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m streamgen.benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run every reference solution through the real scorer")
    check.add_argument("benchmark", choices=available("benchmarks"))
    check.add_argument("overrides", nargs="*", help="key=value overrides of the benchmark YAML")
    check.add_argument("--limit", type=int, default=None, help="only the first N examples")
    check.add_argument("--workers", type=int, default=2, help="parallel sandbox runs (default 2)")
    check.add_argument("--expect", type=int, default=None, help="exit 1 when fewer references pass")
    check.add_argument("--show", type=int, default=20, help="how many failures to list")
    stats = sub.add_parser("stats", help="segments per request and single-segment share")
    stats.add_argument("benchmarks", nargs="*", help="default: every configs/benchmarks/*.yaml")
    sub.add_parser("verify", help="every data file against the data directory's MANIFEST.tsv")
    for sp in sub.choices.values():
        sp.add_argument("--data-dir", type=Path, default=None)
    return p


def _check(args: argparse.Namespace) -> int:
    bench = load_benchmark(benchmark_config(args.benchmark, args.overrides))
    report = check_references(bench, bench.examples(args.data_dir, args.limit), workers=args.workers)
    print(report.line())
    shown = sorted(report.failures, key=lambda f: f not in report.unexpected)  # unexpected first
    for f in shown[: args.show]:
        last = f.detail.strip().splitlines()[-1:] or [""]
        known = " (known)" if f not in report.unexpected else ""
        print(f"  {f.example_id}: {f.status}{known}: {last[0][:160]}")
    if len(report.failures) > args.show:
        print(f"  ... and {len(report.failures) - args.show} more")
    below = args.expect is not None and report.passed < args.expect
    return 0 if report.ok and not below else 1


def _stats(args: argparse.Namespace) -> int:
    rows = []
    for name in args.benchmarks or available("benchmarks"):
        bench = load_benchmark(benchmark_config(name))
        rows.append(segmentation_stats(bench, bench.examples(args.data_dir)))
    print(markdown_table(rows))
    return 0


def _verify(args: argparse.Namespace) -> int:
    data_dir = resolve_data_dir(args.data_dir)
    problems = verify_directory(data_dir)
    for p in problems:
        print(f"  - {p}")
    print(f"{data_dir}: {len(read_manifest(data_dir))} files in {MANIFEST_NAME}, {len(problems)} problems")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = _parser().parse_args(argv)
    return {"check": _check, "stats": _stats, "verify": _verify}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
