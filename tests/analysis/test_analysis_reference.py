"""Every analysis table equals the frozen pre-issue-15 SQL (bench/analysis_reference/), row for row.

Issue 15 rewrote the deduplication (a window only over keys written twice) and the steps tables
(steps joined once to their pairs row, then grouped and self-joined on an integer). The synthetic
directory below takes every path that rewrite has: an example rewritten by a later run of the same
fingerprint (window path, the older steps left orphaned), a pairs and a steps file copied verbatim
(exact ties; every step joins twice), steps without draft fingerprints, a gap in the steps, and an
adapted variant (adaptation has rows). Each test also asserts that its path was taken.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings

from analysis.tables import TABLES, build_tables, connect
from bench.analysis_reference import reference_tables, table_differences
from tests.analysis.test_analysis_fingerprints import with_older_copies
from tests.analysis.test_analysis_stats import HYPO
from tests.support.analysis_fixtures import write_record_set
from tests.support.synthetic import SyntheticSpec, write_synthetic_results

SPEC = SyntheticSpec(examples_per_cell=12, mean_segments=5.0, variants=(None, "lora"))


def _set_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), table.schema.field(name), values)


def _rerun(path: Path, dest: Path, run_id: str) -> None:
    """``path`` written again (same fingerprint, same examples) by a later run into ``dest``."""
    table = pq.read_table(path)
    pq.write_table(_set_column(table, "run_id", pa.array([run_id] * table.num_rows)), dest)


def _edit_steps(path: Path) -> None:
    """Drop the fingerprint of every third step and the second step of the first request."""
    table = pq.read_table(path)
    n = table.num_rows
    keep_fp = pa.array([i % 3 != 0 for i in range(n)])
    fp = pc.if_else(keep_fp, table["draft_fingerprint"], pa.nulls(n, pa.string()))
    table = _set_column(table, "draft_fingerprint", fp)
    first = table["example_id"][0]
    gap = pc.and_(pc.equal(table["example_id"], first), pc.equal(table["step"], 2))
    pq.write_table(table.filter(pc.invert(gap)), path)


@pytest.fixture(scope="module")
def results() -> Path:
    root = Path(tempfile.mkdtemp(prefix="analysis-reference-"))
    write_synthetic_results(root, SPEC)
    _rerun(root / "pairs/cell-0/part-0.parquet", root / "pairs/cell-0/rerun.parquet", "synthetic-run-2")
    _rerun(root / "steps/cell-0/part-0.parquet", root / "steps/cell-0/rerun.parquet", "synthetic-run-2")
    for sub in ("pairs", "steps"):
        shutil.copy(root / sub / "cell-1/part-0.parquet", root / sub / "cell-1/copy.parquet")
    _edit_steps(root / "steps/cell-2/part-0.parquet")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _differences(root: Path, **kwargs: bool) -> list[str]:
    new = build_tables(root, **kwargs)
    old = reference_tables(root, **kwargs)
    return [d for name in TABLES for d in table_differences(name, new[name], old[name])]


@pytest.mark.parametrize("latest", [False, True])
def test_every_table_equals_the_frozen_sql(results: Path, latest: bool) -> None:
    assert _differences(results, latest=latest) == []


def test_the_fixture_takes_every_rewritten_path(results: Path) -> None:
    con = connect(results)
    try:
        dup_keys = con.execute("SELECT count(*) FROM pair_dups").fetchone()[0]
        picked = con.execute("SELECT count(*) FROM pairs WHERE run_id = 'synthetic-run-2'").fetchone()[0]
        rows = {n: con.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in ("pairs_files", "pairs")}
        tables = build_tables(results)
    finally:
        con.close()
    per_cell = SPEC.examples_per_cell
    # cell-0 rerun + cell-1 copied: 2 * per_cell keys written twice, each counted once
    assert dup_keys == 2 * per_cell and picked == per_cell
    assert rows["pairs_files"] - rows["pairs"] == 2 * per_cell
    stability = tables["draft_stability"].to_pylist()
    assert all(r["n_steps_compared"] > 0 for r in stability)
    assert 0 < sum(r["share_steps_unchanged"] for r in stability) < len(stability)
    assert tables["adaptation"].num_rows > 0


@settings(HYPO, max_examples=6)
@given(with_older_copies())
def test_random_record_sets_equal_the_frozen_sql(sets) -> None:
    written, _ = sets
    with tempfile.TemporaryDirectory() as tmp:
        root = write_record_set(Path(tmp), written)
        assert _differences(root) == []
