"""Time to build every analysis table over a large synthetic results directory.

    python bench/bench_analysis.py                          # 10^6 pairs, ~10^7 steps, 2 threads
    python bench/bench_analysis.py --pairs 100000 --threads 1
    python bench/bench_analysis.py --report                 # also time the full report (CSVs + figures)

Rows are generated column-wise with numpy/pyarrow (tests/synthetic.py), written as Parquet into a
temporary directory (one pairs and one steps file per cell, like the grid's shard files but larger),
then ``analysis.tables`` runs every SQL file with DuckDB limited to ``--threads`` threads. Prints
per-table times and the total; the machine may be shared, so compare figures from one run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.report import write_report  # noqa: E402
from analysis.tables import TABLES, connect, run_table  # noqa: E402
from tests.synthetic import SyntheticSpec, write_synthetic_results  # noqa: E402


def _size_mb(root: Path, sub: str) -> float:
    return sum(p.stat().st_size for p in (root / sub).rglob("*.parquet")) / 1e6


def generate(root: Path, n_pairs: int, steps_per_pair: float) -> dict[str, int]:
    base = SyntheticSpec(files_per_cell=1)
    cells = len(base.models) * len(base.benchmarks) * len(base.settings) * len(base.variants)
    spec = replace(base, examples_per_cell=-(-n_pairs // cells), mean_segments=steps_per_pair)
    return write_synthetic_results(root, spec)


def time_tables(root: Path, threads: int) -> dict[str, float]:
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    con = connect(root, threads=threads)
    times["connect + views"] = time.perf_counter() - t0
    try:
        for name in TABLES:
            t = time.perf_counter()
            rows = run_table(con, name).num_rows
            times[f"{name} ({rows} rows)"] = time.perf_counter() - t
    finally:
        con.close()
    times["TOTAL every table"] = time.perf_counter() - t0
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--steps-per-pair", type=float, default=10.4, help="mean segments per request")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--report", action="store_true", help="also time write_report (CSVs + figures)")
    ap.add_argument("--keep", type=Path, default=None, help="write here and keep the files")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    try:
        t = time.perf_counter()
        counts = generate(root, args.pairs, args.steps_per_pair)
        gen_s = time.perf_counter() - t
        print(
            f"generated {counts['pairs']:,} pairs rows ({_size_mb(root, 'pairs'):.0f} MB) and "
            f"{counts['steps']:,} steps rows ({_size_mb(root, 'steps'):.0f} MB) in {gen_s:.1f} s"
        )
        times = time_tables(root, args.threads)
        print(f"DuckDB threads={args.threads}")
        for name, secs in times.items():
            print(f"  {name:<40} {secs:8.2f} s")
        if args.report:
            t = time.perf_counter()
            rep = write_report(root, threads=args.threads)
            print(
                f"  {'write_report (CSVs + ' + str(len(rep.figure_paths)) + ' figures)':<40} "
                f"{time.perf_counter() - t:8.2f} s"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
