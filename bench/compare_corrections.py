"""What corrections cost: one grid run without typos (A) and the same grid with them (B), paired per example.

    python bench/compare_corrections.py RESULTS_A RESULTS_B [--populations desktop mobile] [--users 200] [--seed 0]

Each directory is read as the report's ``--latest`` reads it (per cell name, the newest run's settings: a
rerun with a larger ``limit`` replaces the smaller one). Pairs are matched on (model, benchmark,
acceptance, τ, example id): a cell's id differs between the two
runs (typos enter it) but the base run's work does not, so each example's base run is done twice on the
same code and the two base walls measure the machine's run-to-run noise. Printed side by side:

1. Work, per benchmark (forward counts; no clock): included pairs, steps and the steps that rewrote text (B),
   correction keystrokes (B), residual forwards A / B and the pairs where they differ, residual tokens fed,
   speculative forwards.
2. Waits over each typist population (analysis.population, the report's table), paired per (example,
   user, policy): p50 / p90 wait and keeps-up share in A and B, the median paired change B − A of the
   wait, and beside it the median paired change of the *base* wait, which no typo touches: a wait change
   no larger than that is noise of the machine, not a cost of corrections.
"""

from __future__ import annotations

import argparse
import sys

import duckdb
import pyarrow as pa

from analysis.population import build_population
from analysis.tables import ResultsNotFoundError, connect
from streamgen.config import ConfigError, TypingConfig


def _pairs(results: str) -> pa.Table:
    con = connect(results, threads=1, latest=True)
    try:
        return con.sql("""
            SELECT p.model, p.benchmark, p.acceptance, p.tau, p.example_id, p.residual_forwards,
                   p.residual_tokens_fed, p.speculative_forwards, p.base_wall_s,
                   count(s.step) AS steps, count(s.step) FILTER (WHERE s.chars_deleted > 0) AS rewrites,
                   coalesce(sum(s.correction_keys), 0) AS correction_keys
            FROM pairs p LEFT JOIN steps s USING (run_id, cell_id, example_id)
            WHERE p.error_type IS NULL AND p.excluded_reason IS NULL
            GROUP BY ALL""").to_arrow_table()
    finally:
        con.close()


WORK = """
SELECT a.benchmark, count(*) AS pairs, sum(b.steps) AS steps_b, sum(b.rewrites) AS rewrites_b,
       sum(b.correction_keys) AS correction_keys_b,
       sum(a.residual_forwards) AS residual_fwd_a, sum(b.residual_forwards) AS residual_fwd_b,
       count(*) FILTER (WHERE a.residual_forwards <> b.residual_forwards) AS pairs_residual_differs,
       sum(a.residual_tokens_fed) AS residual_fed_a, sum(b.residual_tokens_fed) AS residual_fed_b,
       sum(a.speculative_forwards) AS speculative_fwd_a, sum(b.speculative_forwards) AS speculative_fwd_b,
       median(b.base_wall_s / a.base_wall_s) AS base_wall_ratio_median
FROM pa_ a JOIN pb_ b ON a.model = b.model AND a.benchmark = b.benchmark AND a.acceptance = b.acceptance
    AND a.tau IS NOT DISTINCT FROM b.tau AND a.example_id = b.example_id  -- τ is NULL under greedy
GROUP BY ALL ORDER BY ALL"""

WAITS = """
SELECT a.benchmark, a.preset, a.policy, count(*) AS n,
       quantile_cont(a.wait_s, 0.5) AS p50_a, quantile_cont(b.wait_s, 0.5) AS p50_b,
       quantile_cont(a.wait_s, 0.9) AS p90_a, quantile_cont(b.wait_s, 0.9) AS p90_b,
       avg(a.keeps_up::INT) AS keeps_up_a, avg(b.keeps_up::INT) AS keeps_up_b,
       median(b.wait_s - a.wait_s) AS wait_change_median,
       median(b.base_wait_s - a.base_wait_s) AS base_wait_change_median
FROM ea_ a JOIN eb_ b ON a.model = b.model AND a.benchmark = b.benchmark AND a.acceptance = b.acceptance
    AND a.tau IS NOT DISTINCT FROM b.tau AND a.example_id = b.example_id AND a.preset = b.preset
    AND a.users = b.users AND a.seed = b.seed AND a."user" = b."user" AND a.policy = b.policy
WHERE a.wait_s IS NOT NULL AND b.wait_s IS NOT NULL
GROUP BY ALL ORDER BY ALL"""


def _print(title: str, table: pa.Table) -> None:
    print(f"\n## {title}\n")
    cols = table.column_names
    print("| " + " | ".join(cols) + " |")
    print("|" + " --- |" * len(cols))
    for row in table.to_pylist():
        print("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row.values()) + " |")


def compare(a: str, b: str, cfg: TypingConfig) -> tuple[pa.Table, pa.Table]:
    """``(work, waits)``: the two tables this script prints, for results ``a`` (no typos) and ``b``."""
    con = duckdb.connect(":memory:", config={"threads": 1})
    con.register("pa_", _pairs(a))
    con.register("pb_", _pairs(b))
    work = con.sql(WORK).to_arrow_table()
    con.register("ea_", build_population(a, cfg, threads=1, latest=True).examples)
    con.register("eb_", build_population(b, cfg, threads=1, latest=True).examples)
    return work, con.sql(WAITS).to_arrow_table()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="results without typos")
    parser.add_argument("b", help="the same grid with corrections")
    parser.add_argument("--populations", nargs="+", default=["desktop", "mobile"])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        cfg = TypingConfig(populations=list(args.populations), users=args.users, seed=args.seed)
        work, waits = compare(args.a, args.b, cfg)
    except (ResultsNotFoundError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print("Work (forward counts)", work)
    _print(f"Waits over the populations ({args.users} users, seed {args.seed}), paired per (example, user, policy)",
           waits)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
