"""Shared work across acceptance cells: model calls executed with and without it, rows compared.

    python bench/bench_shared_work.py                      # greedy + four τ, tiny and scripted models
    python bench/bench_shared_work.py grid=smoke models=[tiny-llama] limit=5   # any overrides

Runs the same grid twice in one process, ``share_work=true`` then ``share_work=false``, each into a
fresh temporary results directory, and prints side by side: model calls the actors executed
(``runs.forwards_executed``), decode time, and the saving; then, cell by cell, whether the two runs'
rows agree (answers and forward counts; every other column too, except run ids, code versions,
actor ids and wall clocks: ``bench/compare_results.py``). Exits 1 if any row differs.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow.parquet as pq  # noqa: E402

from bench.compare_results import rows  # noqa: E402
from jobs.run.driver import GridSummary, run_grid  # noqa: E402
from streamgen.acceptance_rules import column_label  # noqa: E402
from streamgen.config import grid_config  # noqa: E402
from streamgen.results.cells import cell_label  # noqa: E402

DEFAULTS = ["models=[tiny-llama,tiny-llada,scripted-ar-calibrated,scripted-refusion-calibrated]",
            "benchmarks=[coedit]", "acceptance=[greedy,threshold]", "taus=[0.3,0.5,0.7,0.9]", "limit=4",
            "shard_size=4", "workers=1"]
COMPARED = ("base_answer", "stream_answer", "base_forwards", "residual_forwards", "speculative_forwards")


def run_once(name: str, overrides: list[str], share: bool, root: Path) -> tuple[GridSummary, Path]:
    out = root / f"share_{share}"
    summary = run_grid(grid_config(name, [*overrides, f"share_work={str(share).lower()}", f"results_dir={out}"]),
                       progress=False)
    executed = [r["forwards_executed"] for f in (out / "runs").glob("*.parquet") for r in pq.read_table(f).to_pylist()]
    assert executed == [summary.forwards_executed], (executed, summary.forwards_executed)  # the runs column
    return summary, out


def compare_cells(a: Path, b: Path) -> int:
    """Per cell: examples, whether answers and forward counts agree; returns the number of differing rows."""
    ra, rb = rows(a, "pairs"), rows(b, "pairs")
    by_cell: dict[str, list[tuple]] = defaultdict(list)
    for key, row in ra.items():
        by_cell[cell_label(row["model"], row["benchmark"], column_label(row["acceptance"], row["tau"]),
                               row["verifier_mode"])].append(key)
    differing = len(set(ra) ^ set(rb))
    for label, keys in sorted(by_cell.items()):
        same = [k in rb and all(ra[k][c] == rb[k][c] for c in COMPARED) for k in keys]
        whole = [k in rb and ra[k] == rb[k] for k in keys]
        differing += len(keys) - sum(whole)
        print(f"  {label:60s} {len(keys)} examples | answers+forwards equal {sum(same)}/{len(keys)} | "
              f"all columns equal {sum(whole)}/{len(keys)}")
    steps_a, steps_b = rows(a, "steps"), rows(b, "steps")
    steps_differing = sum(steps_a.get(k) != steps_b.get(k) for k in set(steps_a) | set(steps_b))
    print(f"  steps rows: {len(steps_a)} vs {len(steps_b)}, differing {steps_differing}")
    return differing + steps_differing


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING)
    name = next((a.split("=", 1)[1] for a in argv if a.startswith("grid=")), "smoke")
    overrides = [*DEFAULTS, *(a for a in argv if not a.startswith("grid="))]
    with tempfile.TemporaryDirectory(prefix="bench_shared_") as tmp:
        (shared, a), (separate, b) = (run_once(name, overrides, s, Path(tmp)) for s in (True, False))
        for label, s in (("share_work=true ", shared), ("share_work=false", separate)):
            print(f"{label}: {s.examples} examples, {s.shards_done} shards, {s.errors} errors | forwards executed "
                  f"{s.forwards_executed} | decode {s.timings.decode_s:.1f} s (forwards {s.timings.forward_s:.1f} s) "
                  f"| wall {s.wall_s:.1f} s")
        saving = 1 - shared.forwards_executed / separate.forwards_executed
        print(f"model calls executed: {shared.forwards_executed} vs {separate.forwards_executed}: "
              f"{100 * saving:.1f} % fewer with sharing (target >= 35 %); decode time ratio "
              f"{shared.timings.decode_s / separate.timings.decode_s:.2f}")
        print("rows, cell by cell (sharing vs not):")
        differing = compare_cells(a, b)
    print(f"{differing} differing rows")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
