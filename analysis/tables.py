"""Run the SQL files in ``analysis/sql/`` over a results directory and return the tables.

A results directory holds ``pairs/**/*.parquet``, ``steps/**/*.parquet`` and ``runs/*.parquet``
(docs/grid.md, docs/analysis.md). The runner registers three views over them (``pairs``, ``steps``, ``runs``),
executes ``_views.sql`` (the row-level ``pair_rows`` view), then each table's SQL file in order;
every finished table is registered under its own name so later files can build on it (``models``
reads ``cells``). Each file's text goes through ``analysis.sql_template`` first (``sql_text``): the setting
key is named there once, the files name it by placeholder. Statistics and their exact definitions: ``docs/analysis.md``.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from analysis.fingerprints import FINGERPRINT_QUERY, cell_tags
from analysis.sql_template import expand
from streamgen.results.compaction import compact_if_idle
from streamgen.results.manifest import read_manifest
from streamgen.results.read_lock import read_shared
from streamgen.results.records import PAIRS_SCHEMA, RUNS_SCHEMA, SCORES_SCHEMA, STEPS_SCHEMA
from streamgen.results.result_files import literal_glob, readable_files

log = logging.getLogger(__name__)

SQL_DIR = Path(__file__).with_name("sql")

TABLES: tuple[str, ...] = (
    "fingerprints",
    "cells",
    "models",
    "distribution",
    "exclusions",
    "step_summary",
    "adaptation",
    "adaptation_ci",
    "tau_sweep",
    "run_list",
    "attainable",
    "speed_quality",
    "draft_stability",
    "model_speedups",
    "rescored",
    "divergence",
)
"""Every table the report writes, in execution order (a file may read the tables before it)."""

_SOURCES: dict[str, pa.Schema] = {
    "pairs": PAIRS_SCHEMA, "steps": STEPS_SCHEMA, "runs": RUNS_SCHEMA,
    "scores": SCORES_SCHEMA,  # analysis.rescore's re-scored rows
}


class ResultsNotFoundError(FileNotFoundError):
    """The directory has no pairs result files, so there is nothing to analyse."""


@dataclass(frozen=True)
class ResultFiles:
    """The files of one results directory, per source table."""

    results_dir: Path
    pairs: tuple[Path, ...]
    steps: tuple[Path, ...]
    runs: tuple[Path, ...]
    scores: tuple[Path, ...] = ()


def find_result_files(results_dir: str | Path, *, compact: bool = True) -> ResultFiles:
    """Compact the directory when it holds many per-shard files and no run holds it (``compact``;
    ``streamgen.results.compaction.compact_if_idle``), then list the result files a reader may trust
    (``streamgen.results.result_files``: each foreign, empty or unreadable file is skipped with one
    warning); raises ``ResultsNotFoundError`` when no pairs file is left. A caller that reads the files
    later holds ``streamgen.results.read_lock.read_shared`` from before this call (``connect_keyed``)."""
    root = Path(results_dir)
    if compact:
        compact_if_idle(root)  # 10^4 per-shard files cost minutes per read; merged, seconds
    manifest = read_manifest(root)
    found = {name: readable_files(root, name, manifest=manifest).files for name in _SOURCES}
    if not found["pairs"]:
        raise ResultsNotFoundError(
            f"no result files under {root}/pairs/; run `python workflows/full_grid.py "
            f"results_dir={root}` first, or pass the directory that holds pairs/, steps/, runs/"
        )
    return ResultFiles(root, found["pairs"], found["steps"], found["runs"], found["scores"])


def sql_text(name: str) -> str:
    """The text of ``analysis/sql/<name>.sql`` with its placeholders written out (``analysis.sql_template``:
    the setting key, the declared per-pair columns)."""
    path = SQL_DIR / f"{name}.sql"
    return expand(path.read_text(), source=str(path))


def _quote(text: str) -> str:
    """A SQL string literal (single quotes doubled), for paths inside generated SQL."""
    return "'" + text.replace("'", "''") + "'"


_VIEW_NAMES = {"pairs": "pairs_files"}  # raw pairs; _cells.sql builds the deduplicated `pairs` on it


def _register_source(con: duckdb.DuckDBPyConnection, name: str, files: Sequence[Path]) -> None:
    """View over ``files`` (``pairs_files`` for pairs, else ``name``); missing record columns become
    typed NULLs, no files → empty."""
    schema = _SOURCES[name]
    view, name = _VIEW_NAMES.get(name, name), name
    if not files:
        con.register(f"_{name}_empty", schema.empty_table())
        con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM _{name}_empty")
        return
    file_list = "[" + ", ".join(_quote(literal_glob(f)) for f in files) + "]"  # a `*` in a name is a `*`
    options = "union_by_name = true, hive_partitioning = false"
    scan = f"read_parquet({file_list}, {options})"
    present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
    fill = [f"NULL::{_duck_type(f.type)} AS {f.name}" for f in schema if f.name not in present]
    if fill:
        log.warning(
            "%s files lack columns %s; read as NULL", name, [f.name for f in schema if f.name not in present]
        )
    extra = "".join(", " + c for c in fill)
    con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT *{extra} FROM {scan}")
    if name == "pairs":  # the same rows with the file each came from: named when a row is left out
        named = f"read_parquet({file_list}, {options}, filename = true)"
        con.execute(f"CREATE OR REPLACE TEMP VIEW pairs_files_named AS SELECT *{extra} FROM {named}")


_DUCK_TYPES = {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN"}


def _duck_type(dtype: pa.DataType) -> str:
    return _DUCK_TYPES[dtype]


def _duckdb(threads: int | None) -> duckdb.DuckDBPyConnection:
    config: dict[str, str | bool | int | float | list[str]] = {"threads": threads} if threads else {}
    return duckdb.connect(":memory:", config=config)


def connect_keyed(results_dir: str | Path, *, threads: int | None = None,
                  sql: Callable[[str], str] = sql_text) -> duckdb.DuckDBPyConnection:
    """A connection with the source views and ``pairs_keyed`` (every pairs row, its fingerprint, its
    newest re-score), before deduplication: what ``analysis.rescore`` reads."""
    compact_if_idle(Path(results_dir))  # 10^4 per-shard files cost minutes per read; merged, seconds
    held = read_shared(results_dir)  # no compaction deletes a file we list until the connection is gone
    try:
        files = find_result_files(results_dir, compact=False)
        con = _duckdb(threads)
        weakref.finalize(con, held.release)
    except BaseException:
        held.release()
        raise
    for name in _SOURCES:
        _register_source(con, name, getattr(files, name))
    con.execute(sql("_cells"))
    return con


def connect(results_dir: str | Path, *, threads: int | None = None,
            latest: bool = False, sql: Callable[[str], str] = sql_text) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with ``pairs`` (each (cell fingerprint, example) once),
    ``steps``, ``runs`` and ``pair_rows`` views. ``latest``: keep only the most recent run's
    fingerprint of each cell name. ``sql``: name → text of ``_cells``, ``_dedup`` and ``_views``
    (bench/analysis_reference.py passes the frozen copies it compares against)."""
    con = connect_keyed(results_dir, threads=threads, sql=sql)
    _report_null_keys(con)
    rows = con.sql(FINGERPRINT_QUERY).to_arrow_table().to_pylist()
    con.register("cell_tags", cell_tags(rows, latest=latest))
    con.execute(sql("_dedup"))
    con.execute(sql("_views"))
    # Every table reads pair_rows: read the Parquet files and deduplicate once, not per table.
    # pair_rows is narrow (no answer text), so this costs ~200 MB per 10^6 pairs at most; _steps.sql
    # keys the steps by this table's rowid.
    con.execute("CREATE TEMP TABLE pair_rows_done AS SELECT * FROM pair_rows")
    con.execute("CREATE OR REPLACE TEMP VIEW pair_rows AS SELECT * FROM pair_rows_done")
    return con


def _report_null_keys(con: duckdb.DuckDBPyConnection) -> int:
    """Log how many pairs rows ``_cells.sql`` left out for a NULL cell or example key; returns the count."""
    views = con.execute("SELECT view_name FROM duckdb_views() WHERE view_name = 'pairs_null_keys'").fetchall()
    if not views:
        return 0  # a frozen reference copy of _cells.sql (bench/analysis_reference.py) has no such view
    no_cell, no_example, dropped = con.execute("SELECT no_cell, no_example, dropped FROM pairs_null_keys").fetchall()[0]
    if dropped:
        where = ", ".join(f"{name} ({n})" for name, n in con.execute(
            "SELECT filename, count(*) FROM pairs_files_named WHERE coalesce(cell_fingerprint, cell_id) IS NULL "
            "OR example_id IS NULL GROUP BY filename ORDER BY filename").fetchall())
        log.warning("%d pairs rows left out: %d without a cell fingerprint or cell id, %d without an example "
                    "id (they belong to no cell/example; not written by streamgen): %s; move such files out of "
                    "the results directory", dropped, no_cell, no_example, where)
    return int(dropped)


_PREPARE: dict[str, str] = {"step_summary": "_steps", "draft_stability": "_steps"}
"""Table → the SQL file that builds the intermediate tables it reads (each creates its tables only
if they do not exist yet, so they are built once per connection, and only when a table needs them)."""


def run_table(con: duckdb.DuckDBPyConnection, name: str) -> pa.Table:
    """Execute ``<name>.sql`` on ``con``, register the result as view ``name`` and return it."""
    if name in _PREPARE:
        con.execute(sql_text(_PREPARE[name]))
    table = con.sql(sql_text(name)).to_arrow_table()
    con.register(name, table)
    return table


def build_tables(
    results_dir: str | Path, names: Sequence[str] = TABLES, *, threads: int | None = None,
    latest: bool = False,
) -> dict[str, pa.Table]:
    """Every table in ``names`` (default: all of ``TABLES``) over one results directory
    (``latest``: only the most recent run's fingerprint of each cell name)."""
    con = connect(results_dir, threads=threads, latest=latest)
    try:
        wanted = set(names)
        needed = [n for n in TABLES if n in wanted or _is_dependency(n, wanted)]
        built = {n: run_table(con, n) for n in needed}
        extra = [n for n in names if n not in TABLES]
        built.update({n: run_table(con, n) for n in extra})
        return {n: built[n] for n in names}
    finally:
        con.close()


_DEPENDS = {
    "models": {"cells"},
    "adaptation": {"cells", "distribution", "step_summary"},
    "tau_sweep": {"models", "cells"},
}


def _is_dependency(name: str, wanted: set[str]) -> bool:
    return any(name in _DEPENDS.get(w, set()) for w in wanted)


def table_over_pairs(pairs: pa.Table, name: str, *, threads: int | None = None) -> pa.Table:
    """``<name>.sql`` over in-memory pairs rows (a bench's own runs, ``bench/gpu_check.py``), with no
    deduplication and no settings tags: the same statistic as the report's, on rows never written."""
    con = _duckdb(threads)
    try:
        if "settings_tag" not in pairs.schema.names:
            pairs = pairs.append_column("settings_tag", pa.nulls(pairs.num_rows, pa.string()))
        con.register("pairs", pairs)
        return con.sql(sql_text(name)).to_arrow_table()
    finally:
        con.close()


def compare_tables(dir_a: str | Path, dir_b: str | Path, *, threads: int | None = None) -> pa.Table:
    """The ``models`` tables of two results directories side by side, with B − A deltas."""
    con = _duckdb(threads)
    try:
        con.register("models_a", build_tables(dir_a, ["models"], threads=threads)["models"])
        con.register("models_b", build_tables(dir_b, ["models"], threads=threads)["models"])
        return con.sql(sql_text("compare")).to_arrow_table()
    finally:
        con.close()
