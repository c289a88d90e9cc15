"""The analysis SQL as it was before issue 15's rewrite, frozen: the reference the tables must equal.

``bench/analysis_reference/*.sql`` are verbatim copies of the files issue 15 rewrote, taken at the
commit before (``_dedup``: a window over every pairs row; ``fingerprints``: count(DISTINCT) over
every row; ``step_summary`` and ``draft_stability``: steps aggregated and self-joined on their three
string keys). ``reference_tables`` runs them, with every other file from ``analysis/sql/``, exactly
as ``analysis.tables`` ran them then; ``bench/bench_analysis.py --reference`` times them side by side
with today's SQL and ``tests/analysis/test_analysis_reference.py`` checks that every table is equal, row for
row. Never edit a copy to make a comparison pass: a difference is a change in what a table means.
When a table's meaning changes on purpose, delete its copy in the same commit.

Equal means: same schema, same number of rows in the same order, every string, integer, boolean
and NULL identical, and every DOUBLE equal to 1e-12 relative (plus 1e-10 absolute, for differences
of near-equal percentages): a sum of doubles depends on the order DuckDB's threads add the rows in,
and that order is not part of any table's definition (the old SQL itself only fixes it by its
incidental plan).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from analysis.tables import TABLES, connect, sql_text

REFERENCE_SQL = Path(__file__).with_name("analysis_reference")
REL_TOL, ABS_TOL = 1e-12, 1e-10

Seconds = tuple[float, float]
"""(wall, process CPU) seconds."""


def reference_sql(name: str) -> str:
    """The frozen text of ``name`` where issue 15 rewrote it, else today's ``analysis/sql`` file."""
    frozen = REFERENCE_SQL / f"{name}.sql"
    return frozen.read_text() if frozen.exists() else sql_text(name)


def now() -> Seconds:
    return time.perf_counter(), time.process_time()


def since(start: Seconds) -> Seconds:
    """(wall, CPU) seconds elapsed since ``start`` (a value of :func:`now`)."""
    wall, cpu = now()
    return wall - start[0], cpu - start[1]


def reference_table_times(results_dir: str | Path, *, threads: int | None = None, latest: bool = False
                          ) -> tuple[dict[str, pa.Table], dict[str, Seconds]]:
    """Every table of ``TABLES`` built by the frozen SQL, and the (wall, CPU) seconds each took
    (``connect + views`` first)."""
    t0 = now()
    con = connect(results_dir, threads=threads, latest=latest, sql=reference_sql)
    times = {"connect + views": since(t0)}
    built: dict[str, pa.Table] = {}
    try:
        for name in TABLES:
            t = now()
            built[name] = con.sql(reference_sql(name)).to_arrow_table()
            con.register(name, built[name])
            times[name] = since(t)
    finally:
        con.close()
    return built, times


def reference_tables(results_dir: str | Path, names: Sequence[str] = TABLES, *,
                     threads: int | None = None, latest: bool = False) -> dict[str, pa.Table]:
    """The tables in ``names`` as the frozen SQL builds them."""
    built, _ = reference_table_times(results_dir, threads=threads, latest=latest)
    return {n: built[n] for n in names}


def _value_differs(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return not (math.isnan(a) and math.isnan(b))
        return not math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return a != b or type(a) is not type(b)


def table_differences(name: str, got: pa.Table, want: pa.Table) -> list[str]:
    """What differs between ``got`` and the reference ``want`` (empty when they are equal)."""
    if got.schema != want.schema:
        return [f"{name}: schema {got.schema} != reference {want.schema}"]
    if got.num_rows != want.num_rows:
        return [f"{name}: {got.num_rows} rows != reference {want.num_rows}"]
    out = []
    for col in got.column_names:
        pairs = zip(got[col].to_pylist(), want[col].to_pylist(), strict=True)
        out += [f"{name}.{col} row {i}: {a!r} != reference {b!r}"
                for i, (a, b) in enumerate(pairs) if _value_differs(a, b)][:3]
    return out
