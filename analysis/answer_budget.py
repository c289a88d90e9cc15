"""How many base answers ended before their answer budget: ``analysis/sql/answer_budget.sql`` over a
results directory's pairs files, and the line ``workflows/full_grid.py`` prints after a run.

A file is read when it is one a reader may trust (:func:`streamgen.results.result_files.readable_files`; the
report warns of the others) and holds the four columns the count needs (model, benchmark,
base_answer_tokens, cell_settings); older or foreign files without them are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import duckdb
import pyarrow.parquet as pq

from analysis.tables import sql_text
from streamgen.results.result_files import literal_glob, readable_files

COLUMNS = ("model", "benchmark", "base_answer_tokens", "cell_settings")


class BudgetCount(NamedTuple):
    """Pairs rows counted (``rows``) and those whose base answer ended before the budget (``early``)."""

    early: int
    rows: int


def budget_count(results_dir: str | Path, models: Sequence[str], benchmarks: Sequence[str]) -> BudgetCount:
    """The count of ``answer_budget.sql`` over the pairs rows of ``models`` × ``benchmarks``."""
    files = [f for f in readable_files(results_dir, "pairs", warn=False).files
             if set(COLUMNS) <= set(pq.read_schema(f).names)]
    if not files:
        return BudgetCount(0, 0)
    con = duckdb.connect(":memory:")
    try:
        listed = "[" + ", ".join("'" + literal_glob(f).replace("'", "''") + "'" for f in files) + "]"
        con.execute(f"CREATE TEMP VIEW budget_pairs AS SELECT {', '.join(COLUMNS)} "
                    f"FROM read_parquet({listed}, union_by_name = true, hive_partitioning = false)")
        early, rows = con.execute(sql_text("answer_budget"),
                                  {"models": list(models), "benchmarks": list(benchmarks)}).fetchone() or (0, 0)
    finally:
        con.close()
    return BudgetCount(int(early), int(rows))


def budget_line(results_dir: str | Path, models: Sequence[str], benchmarks: Sequence[str]) -> str:
    """``base answers ending before the answer budget (EOS): E of N rows (P%)``; no share when N is 0."""
    early, rows = budget_count(results_dir, models, benchmarks)
    share = f" ({early / rows:.0%})" if rows else ""
    return f"base answers ending before the answer budget (EOS): {early} of {rows} rows{share}"
