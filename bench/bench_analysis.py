"""Time to build every analysis table over a large synthetic results directory.

    python bench/bench_analysis.py                          # 10^6 pairs, ~10^7 steps, 2 threads
    python bench/bench_analysis.py --pairs 100000 --threads 1
    python bench/bench_analysis.py --report                 # also time the full report (CSVs + figures)
    python bench/bench_analysis.py --keep /tmp/b --reference # keep the data (reused next time); time the
                                                            # frozen pre-issue-15 SQL too and compare tables
    python bench/bench_analysis.py --pairs 100000 --report --typing-reference
                                                            # the typing evaluation over arrays vs the
                                                            # per-example reference, timed side by side

Rows are generated column-wise with numpy/pyarrow (tests/support/synthetic.py), written as Parquet into a
temporary directory (one pairs and one steps file per cell, like the grid's shard files but larger),
then ``analysis.tables`` runs every SQL file with DuckDB limited to ``--threads`` threads. Prints
per-table wall and process CPU seconds and the total; the machine may be shared, so compare figures
from one run. ``--reference`` also builds every table with the frozen SQL of
``bench/analysis_reference/`` (before issue 15), prints both timings side by side and checks that
the tables are equal (``bench/analysis_reference.py``; exits 1 on a difference). With ``--keep DIR``
an existing synthetic directory of the same size is reused instead of regenerated.
``--typing-reference`` times the typing analysis's per-example rows both ways in one run — over arrays
(``analysis.typing_table.typing_examples``, what the report runs) and one ``policies.evaluate`` call per
example, rate and policy (``tests/support/typing_reference.py``, what it ran before) — and checks they are equal.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.report import write_report  # noqa: E402
from analysis.tables import TABLES, connect, run_table, sql_text  # noqa: E402
from analysis.typing_table import typing_examples  # noqa: E402
from bench.analysis_reference import Seconds, now, reference_table_times, since, table_differences  # noqa: E402
from tests.support.synthetic import SyntheticSpec, write_synthetic_results  # noqa: E402

_SPEC_FILE = "bench-analysis-spec.txt"  # next to pairs/ and steps/: what --keep generated there


def _size_mb(root: Path, sub: str) -> float:
    return sum(p.stat().st_size for p in (root / sub).rglob("*.parquet")) / 1e6


def generate(root: Path, n_pairs: int, steps_per_pair: float) -> dict[str, int]:
    base = SyntheticSpec(files_per_cell=1)
    cells = len(base.models) * len(base.benchmarks) * len(base.settings) * len(base.variants)
    spec = replace(base, examples_per_cell=-(-n_pairs // cells), mean_segments=steps_per_pair)
    return write_synthetic_results(root, spec)


def data(root: Path, n_pairs: int, steps_per_pair: float) -> None:
    """Generate the synthetic directory, or reuse it when ``root`` already holds this size."""
    wanted = f"pairs={n_pairs} steps_per_pair={steps_per_pair}\n"
    marker = root / _SPEC_FILE
    if marker.exists() and marker.read_text() == wanted:
        print(f"reusing {root} ({wanted.strip()})")
        return
    if (root / "pairs").exists():
        raise SystemExit(f"{root} holds other results; pass an empty or new --keep directory")
    t = time.perf_counter()
    counts = generate(root, n_pairs, steps_per_pair)
    marker.write_text(wanted)
    print(
        f"generated {counts['pairs']:,} pairs rows ({_size_mb(root, 'pairs'):.0f} MB) and "
        f"{counts['steps']:,} steps rows ({_size_mb(root, 'steps'):.0f} MB) in {time.perf_counter() - t:.1f} s"
    )


def time_tables(root: Path, threads: int) -> tuple[dict, dict[str, Seconds]]:
    """Every table of ``TABLES`` and the (wall, CPU) seconds each took, ``connect + views`` first."""
    t0 = now()
    con = connect(root, threads=threads)
    times = {"connect + views": since(t0)}
    built = {}
    try:
        for name in TABLES:
            t = now()
            built[name] = run_table(con, name)
            times[name] = since(t)
    finally:
        con.close()
    return built, times


def _total(times: dict[str, Seconds]) -> Seconds:
    return sum(w for w, _ in times.values()), sum(c for _, c in times.values())


def show(tables: dict, times: dict[str, Seconds], reference: dict[str, Seconds] | None) -> None:
    head = f"  {'table':<34} {'wall s':>8} {'cpu s':>8}"
    print(head + (f" {'old wall':>9} {'old cpu':>8}" if reference else ""))
    rows = [*times.items(), ("TOTAL every table", _total(times))]
    for name, (wall, cpu) in rows:
        label = f"{name} ({tables[name].num_rows} rows)" if name in tables else name
        line = f"  {label:<34} {wall:8.2f} {cpu:8.2f}"
        if reference:
            old = _total(reference) if name.startswith("TOTAL") else reference[name]
            line += f" {old[0]:9.2f} {old[1]:8.2f}"
        print(line)


def compare(new: dict, old: dict) -> int:
    diffs = [d for name in TABLES for d in table_differences(name, new[name], old[name])]
    for d in diffs:
        print("  DIFFERS", d)
    print(f"tables equal to the frozen SQL: {'no' if diffs else 'yes'} ({len(TABLES)} tables compared)")
    return 1 if diffs else 0


@contextlib.contextmanager
def per_example_typing() -> Iterator[None]:
    """The report's typing rows computed as before (tests/support/typing_reference.py), for a side-by-side time."""
    import analysis.typing_table as timing
    from tests.support.typing_reference import typing_rows

    arrays = timing.typing_examples

    def reference(inputs, cfg):  # type: ignore[no-untyped-def]
        rows, fits = typing_rows(inputs.to_pylist(), cfg)
        return timing._examples_table(rows), fits

    timing.typing_examples = reference
    try:
        yield
    finally:
        timing.typing_examples = arrays


def typing_side_by_side(root: Path, threads: int) -> int:
    """The typing rows over arrays and per example, timed on the same inputs; 1 if they differ."""
    from streamgen.config import TypingConfig
    from tests.support.typing_reference import typing_rows

    con = connect(root, threads=threads)
    try:
        inputs = con.sql(sql_text("_typing_inputs")).to_arrow_table()
    finally:
        con.close()
    cfg = TypingConfig()
    t = now()
    table, _ = typing_examples(inputs, cfg)
    arrays = since(t)
    t = now()
    reference, _ = typing_rows(inputs.to_pylist(), cfg)
    per_example = since(t)
    live = [r for r in reference if r["source"] == "live"]  # the array rows put the live ones last
    same = table.to_pylist() == [r for r in reference if r["source"] != "live"] + live
    print(f"typing rows ({table.num_rows:,} = examples x {len(cfg.chars_per_s)} rates x {len(cfg.policies)} policies "
          f"from {inputs.num_rows:,} steps rows): arrays {arrays[0]:.2f} s wall / {arrays[1]:.2f} s cpu, "
          f"per example {per_example[0]:.2f} s wall / {per_example[1]:.2f} s cpu "
          f"(ratio {per_example[0] / arrays[0]:.0f}x); equal: {'yes' if same else 'NO'}")
    return 0 if same else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--steps-per-pair", type=float, default=10.4, help="mean segments per request")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--report", action="store_true", help="also time write_report (CSVs + figures)")
    ap.add_argument("--reference", action="store_true", help="also time the frozen SQL and compare tables")
    ap.add_argument("--keep", type=Path, default=None, help="write here and keep the files (reused next time)")
    ap.add_argument("--typing-reference", action="store_true",
                    help="time the typing rows over arrays and per example side by side, and compare them")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    status = 0
    try:
        data(root, args.pairs, args.steps_per_pair)
        old_tables, old_times = reference_table_times(root, threads=args.threads) if args.reference else ({}, None)
        tables, times = time_tables(root, args.threads)
        print(f"DuckDB threads={args.threads} (wall and process CPU seconds; old = frozen pre-issue-15 SQL)")
        show(tables, times, old_times)
        if args.reference:
            status = compare(tables, old_tables)
        if args.typing_reference:
            status = max(status, typing_side_by_side(root, args.threads))
        if args.report:
            t = time.perf_counter()
            rep = write_report(root, threads=args.threads)
            new_s = time.perf_counter() - t
            print(f"  {'write_report (CSVs + ' + str(len(rep.figure_paths)) + ' figures)':<34} {new_s:8.2f} s")
            if args.typing_reference:
                t = time.perf_counter()
                with per_example_typing():
                    write_report(root, threads=args.threads)
                old_s = time.perf_counter() - t
                print(f"  {'write_report, per-example typing':<34} {old_s:8.2f} s  (ratio {old_s / new_s:.1f}x)")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
