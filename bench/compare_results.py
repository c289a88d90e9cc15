"""Compare the pairs and steps rows of two results directories, ignoring what differs run to run.

    python bench/compare_results.py RESULTS_A RESULTS_B

Rows are matched by (shard id, example id[, step]); every column is compared except run ids, code
versions, actor ids and wall clocks (``*wall_s``, ``arrival_s``, ``start_s``). Prints the row counts
and every difference; exits 1 if any.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

IGNORED = {"run_id", "code_version", "actor_id", "arrival_s", "start_s"}
KEYS = {"pairs": ("shard_id", "example_id"), "steps": ("shard_id", "example_id", "step")}


def comparable(row: dict) -> dict:
    """The row without the columns that differ run to run (ids, versions, wall clocks)."""
    return {k: v for k, v in row.items() if k not in IGNORED and not k.endswith("wall_s")}


def rows(results: Path, table: str) -> dict[tuple, dict]:
    out = {}
    for path in sorted(results.glob(f"{table}/**/*.parquet")):
        for row in pq.read_table(path).to_pylist():
            out[tuple(row[k] for k in KEYS[table])] = comparable(row)
    return out


def main(argv: list[str]) -> int:
    a, b = Path(argv[0]), Path(argv[1])
    differences = 0
    for table in KEYS:
        ra, rb = rows(a, table), rows(b, table)
        columns = sorted({c for r in (*ra.values(), *rb.values()) for c in r})
        print(f"{table}: {len(ra)} rows vs {len(rb)} rows, {len(columns)} columns compared")
        for key in sorted(set(ra) | set(rb), key=str):
            if key not in ra or key not in rb:
                print(f"  {table} {key}: only in {'B' if key not in ra else 'A'}")
                differences += 1
                continue
            for c in columns:
                if ra[key].get(c) != rb[key].get(c):
                    print(f"  {table} {key} {c}: {ra[key].get(c)!r} != {rb[key].get(c)!r}")
                    differences += 1
    print(f"{differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
