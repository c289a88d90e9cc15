"""The result files of a results directory a reader may trust, listed explicitly.

Every reader (``analysis/``, ``--dry-run``'s estimate, the grid's closing summary) takes its files
from :func:`readable_files`: every ``*.parquet`` under ``<results_dir>/<table>/`` found by walking
the directory (a ``*`` or ``[`` in a file name is a character, never a pattern), minus the files it
cannot trust — a dangling symbolic link, an empty or unreadable file, a file without the table's
key columns, a column whose type differs from the record's — each skipped with one warning naming
the file and why. The writer never produces such files; they come from elsewhere (a copy cut short,
a file dropped in by hand, another tool), and one of them must not stop a report.

Merged shards (``streamgen.results.manifest``): the pairs and steps files a compaction merged are listed
from the manifest (checked present at their recorded sizes: a damaged one raises ``ManifestError``
naming the fix, since skipping it would lose rows silently), and the per-shard files of the shards it
lists are skipped by name without being opened, so each row is read from one place.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from streamgen.results.manifest import TABLES as MERGED_TABLES
from streamgen.results.manifest import Manifest, check_batches, read_manifest
from streamgen.results.records import PAIRS_SCHEMA, RUNS_SCHEMA, SCORES_SCHEMA, STEPS_SCHEMA

log = logging.getLogger(__name__)

SCHEMAS: dict[str, pa.Schema] = {"pairs": PAIRS_SCHEMA, "steps": STEPS_SCHEMA, "runs": RUNS_SCHEMA,
                                 "scores": SCORES_SCHEMA}
# columns without which a row cannot be placed (its cell and example; its run)
KEYS: dict[str, tuple[str, ...]] = {
    "pairs": ("run_id", "cell_id", "example_id", "model", "benchmark"),
    "steps": ("run_id", "shard_id", "cell_id", "example_id", "step"),
    "runs": ("run_id", "grid", "started_at"),
    "scores": ("rescore_id", "run_id", "shard_id", "example_id"),  # analysis.rescore's rows
}


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str


@dataclass(frozen=True)
class TableFiles:
    """One table's files: those to read, and those skipped with the reason."""

    table: str
    files: tuple[Path, ...]
    skipped: tuple[Skipped, ...]


def list_files(results_dir: str | os.PathLike[str], table: str) -> list[Path]:
    """Every ``*.parquet`` under ``<results_dir>/<table>/`` (sorted; hidden temporary files excluded)."""
    top = Path(results_dir) / table
    found: list[Path] = []
    for folder, dirs, names in os.walk(top):
        dirs.sort()
        found.extend(Path(folder, n) for n in names if n.endswith(".parquet") and not n.startswith("."))
    return sorted(found)


def _compatible(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want or pa.types.is_null(got):
        return True
    if pa.types.is_integer(want):
        return pa.types.is_integer(got)
    if pa.types.is_floating(want):
        return pa.types.is_floating(got) or pa.types.is_integer(got)
    if pa.types.is_string(want):
        return pa.types.is_string(got) or pa.types.is_large_string(got)
    return False


def file_problem(path: Path, table: str) -> str | None:
    """Why ``path`` cannot be read as a ``table`` file, or None."""
    if path.is_symlink() and not path.exists():
        return f"a dangling symbolic link (to {os.readlink(path)})"
    if not path.is_file():
        return "not a regular file"
    if path.stat().st_size == 0:
        return "an empty file"
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        return f"not a readable Parquet file ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    missing = [k for k in KEYS[table] if k not in schema.names]
    if missing:
        return f"a foreign schema: no {', '.join(missing)} column{'s' * (len(missing) > 1)} of the {table} records"
    for want in SCHEMAS[table]:
        if want.name in schema.names and not _compatible(schema.field(want.name).type, want.type):
            return (f"column {want.name} is {schema.field(want.name).type}, the {table} records have "
                    f"{want.type}")
    return None


def readable_files(results_dir: str | os.PathLike[str], table: str, *, warn: bool = True,
                   manifest: Manifest | None = None) -> TableFiles:
    """The ``table`` files of ``results_dir`` to read (the merged files first, then the per-shard files
    of shards not merged); each skipped one logs one warning (``warn``). ``manifest``: already read."""
    merged: tuple[Path, ...] = ()
    loose = list_files(results_dir, table)
    if table in MERGED_TABLES:
        manifest = read_manifest(results_dir) if manifest is None else manifest
        check_batches(results_dir, manifest)
        merged = manifest.files(results_dir, table)
        loose = [p for p in loose if not manifest.holds(p.stem)]
    files: list[Path] = list(merged)
    skipped: list[Skipped] = []
    for path in loose:
        reason = file_problem(path, table)
        if reason is None:
            files.append(path)
            continue
        skipped.append(Skipped(path, reason))
        if warn:
            log.warning("skipping %s: %s", path, reason)
    return TableFiles(table, tuple(files), tuple(skipped))


def literal_glob(path: str | os.PathLike[str]) -> str:
    """``path`` as a glob pattern matching only itself (``*``, ``?``, ``[`` bracketed), for readers such
    as DuckDB's ``read_parquet`` that expand every path they are given."""
    return re.sub(r"([*?\[])", r"[\1]", str(path))
