"""Every reader of a results directory at the study's shape: time and peak RSS, before and after compaction.

    python bench/bench_results_scale.py --dir /tmp/study                 # all of grid=full's shards (7,205 at auto size)
    python bench/bench_results_scale.py --dir /tmp/s4 --shard-size 4     # the same rows in 30,760 shards
    python bench/bench_results_scale.py --dir /tmp/s --shards 3264       # every 10th shard (1/10 scale)
    python bench/bench_results_scale.py --dir /tmp/s --shards 3264 --before /tmp/code-before
                                                                         # also the readers of another checkout
    python bench/bench_results_scale.py --dir /tmp/s --shards 40 --readers report,dry_run   # tiny (tests)

The data is what a real run leaves (docs/grid.md): the plan of ``grid=full`` (``jobs.grid.plan``: its shards,
cells and example ids; the weights need not be present) written shard by shard at
``jobs.run.writer.ResultWriter``'s paths, in the record schemas, steps then pairs, each atomically (as
``write_shard`` does, without its round trip through record objects and without fsync), with synthetic numbers (``tests/support/synthetic.py``, ~8 steps per pair) under each
shard's real identity columns (``jobs.run.rows.RowContext``). ``--dir`` is built once and reused (its
``bench-spec.txt`` says for how many shards); the after-readers compact it, so a ``--before`` checkout from
before compaction needs a fresh ``--dir`` (the script rebuilds it when it finds it compacted; a checkout
that compacts reads the compacted directory). Each reader runs as its own process under
``/usr/bin/time``; peak RSS is that process's. ``--before DIR``: another checkout of the code
(``git worktree add DIR <commit>``), its readers run first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from jobs.grid.plan import plan_with_problems  # noqa: E402
from jobs.run.rows import RowContext  # noqa: E402
from jobs.run.writer import ResultWriter  # noqa: E402
from streamgen.config import grid_config  # noqa: E402
from streamgen.results.records import PAIRS_SCHEMA, STEPS_SCHEMA, RunRecord, write_parquet_atomic  # noqa: E402
from tests.support.analysis_fixtures import run_record  # noqa: E402
from tests.support.synthetic import SyntheticSpec, pairs_table, steps_table  # noqa: E402

SPEC = "bench-spec.txt"
RUN_ID = "run-study"
READERS = ("report_first", "report", "figures", "latest", "compare", "typing", "view", "rescore", "simulate",
           "dry_run")


def build(root: Path, n_shards: int | None, shard_size: int | None = None) -> int:
    """Write the study's shards (every k-th when ``n_shards`` is given) as a run would; returns how many.
    ``shard_size``: examples per shard instead of grid=full's automatic size (4 gives 30,760 shards, the
    layout of the issue-51 measurement's 32,635, which came from an earlier, costlier estimate)."""
    overrides = [f"results_dir={root}"] + ([f"shard_size={shard_size}"] if shard_size else [])
    plan, _ = plan_with_problems(grid_config("full", overrides))
    assert plan is not None
    shards = plan.shards
    if n_shards:
        shards = [shards[i] for i in np.linspace(0, len(shards) - 1, n_shards).round().astype(int)]
    spec = SyntheticSpec(mean_segments=8.1, run_id=RUN_ID)
    rng = np.random.default_rng(0)
    writer = ResultWriter(root)
    numbers: dict[tuple[int, int], pa.Table] = {}  # 32 synthetic draws per shard size, reused: ~3× faster
    with _no_fsync():  # a bench directory need not survive a power cut; fsync was half of each write
        for i, shard in enumerate(shards):
            key = (i % 32, len(shard.example_ids))
            if key not in numbers:
                numbers[key] = pairs_table(spec, i % 8, key[1], rng)
            _write(writer, shard, numbers[key])
    writer.write_run(_run(len(shards)))
    (root / SPEC).write_text(f"{len(shards)}\n")
    return len(shards)


@contextlib.contextmanager
def _no_fsync():  # noqa: ANN202
    real = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real


def _write(writer: ResultWriter, shard, pairs: pa.Table) -> None:  # noqa: ANN001
    """One shard's files: the synthetic numbers under the shard's real identity columns, at the writer's
    paths in the record schemas, steps then pairs (the marker) — the tables ``write_shard`` builds from the
    records, without the round trip through Python objects. A shard already written (a build resumed) is kept."""
    paths = writer.paths(shard)
    if paths.pairs.exists():
        return
    n, schema = pairs.num_rows, pairs.schema
    identity = {**RowContext(shard.cell, RUN_ID, shard.shard_id, "bench").columns(),
                "example_id": list(shard.example_ids)}
    cols = [pa.array(identity[f.name], f.type) if f.name == "example_id" else
            pa.repeat(pa.scalar(identity[f.name], f.type), n) if f.name in identity else pairs.column(f.name)
            for f in schema]
    pairs = pa.Table.from_arrays(cols, schema=schema)
    write_parquet_atomic(steps_table(pairs).cast(STEPS_SCHEMA), paths.steps)
    write_parquet_atomic(pairs.cast(PAIRS_SCHEMA), paths.pairs)


def _run(n: int) -> RunRecord:
    from dataclasses import replace

    return replace(run_record(RUN_ID), grid="full", shards_total=n, shards_done=n)


def _compacts(code: Path) -> bool:
    """Whether a checkout's readers compact (and so read a compacted directory as they would a run's)."""
    return (code / "streamgen" / "results" / "compaction.py").exists()


def commands(code: Path, root: Path, out: Path, shard_size: int | None = None) -> dict[str, list[str]]:
    grid_overrides = [f"results_dir={root}"] + ([f"shard_size={shard_size}"] if shard_size else [])
    report = [sys.executable, "-m", "analysis.report", str(root), "--out", str(out / "report")]
    probe = ("import sys; from analysis.{m} import {f}; r = {f}({a}); print(len(r) if hasattr(r, '__len__') else r)")
    return {
        "report_first": [*report, "--no-figures"],
        "report": [*report, "--no-figures"],
        "figures": report,
        "latest": [*report, "--no-figures", "--latest"],
        "compare": [*report, "--no-figures", "--compare", str(root)],
        "typing": [*report, "--no-figures", "--typing", "chars_per_s=[4,10]"],
        "view": [sys.executable, "-m", "analysis.view", str(root), "--out", str(out / "view")],
        "rescore": [sys.executable, "-c", probe.format(m="rescore", f="stored_rows", a=repr(str(root)))],
        "simulate": [sys.executable, "-m", "analysis.simulate", str(root), "--users", "1,4", "--out", str(out / "sim")],
        # the dry run's plan, search and estimate (workflows/full_grid.py --dry-run also pre-flights the
        # weights, absent here): the line that counts the complete shards
        "dry_run": [sys.executable, "-c", "from jobs.cluster.dry_run import dry_run_report; from streamgen.config import "
                    f"grid_config; t, _ = dry_run_report(grid_config('full', {grid_overrides!r})); "
                    "print(next(ln for ln in t.splitlines() if 'already complete' in ln).split(': ', 1)[1])"],
    }


def measure(name: str, cmd: list[str], code: Path) -> tuple[float, float, str]:
    """(wall s, peak RSS GB, last line) of one reader as its own process, run in ``code``."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb=%M", *cmd], cwd=code, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(code)})
    wall = time.perf_counter() - t0
    rss = [int(line.split("=")[1]) for line in proc.stderr.splitlines() if line.startswith("maxrss_kb=")]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip() and "maxrss_kb" not in ln]
    note = next((ln for ln in lines if "shards" in ln and "done" in ln), lines[-1] if lines else "")
    if proc.returncode:
        note = f"FAILED rc={proc.returncode}: " + " | ".join(lines[-3:])
    return wall, (rss[0] / 1e6 if rss else float("nan")), note[:110]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="where the results directory is built (kept)")
    parser.add_argument("--shards", type=int, default=None, help="this many of the study's shards (default all)")
    parser.add_argument("--shard-size", type=int, default=None, help="examples per shard (default: grid=full's auto)")
    parser.add_argument("--before", type=Path, default=None, help="a checkout of the code before issue 51")
    parser.add_argument("--readers", default=",".join(READERS), help=f"comma-separated, of {','.join(READERS)}")
    args = parser.parse_args()
    root, wanted = args.dir.resolve(), args.readers.split(",")
    spec = root / SPEC
    if spec.exists() and (root / "merged").exists() and args.before and not _compacts(args.before):
        shutil.rmtree(root)  # the code before compaction must read per-shard files, as it found them
    if not spec.exists():  # (a build cut short resumes: the shards it wrote are kept)
        t0 = time.perf_counter()
        n = build(root, args.shards, args.shard_size)
        files = sum(1 for _ in root.rglob("*.parquet"))
        print(f"built {root}: {n} shards, {files} Parquet files in {time.perf_counter() - t0:.0f} s", flush=True)
    out = root.parent / f"{root.name}-out"
    print(f"{'reader':<13} {'code':<7} {'wall s':>8} {'peak GB':>8}  note")
    for label, code in ([("before", args.before.resolve())] if args.before else []) + [("after", ROOT)]:
        cmds = commands(code, root, out, args.shard_size)
        for name in (r for r in READERS if r in wanted and r in cmds):
            if label == "before" and name == "report_first":
                continue
            wall, rss, note = measure(name, cmds[name], code)
            print(f"{name:<13} {label:<7} {wall:8.1f} {rss:8.2f}  {note}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
