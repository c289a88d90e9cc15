"""Analysis survives foreign files (the hostile battery's result-file cases): random bytes, an empty
file, a dangling symlink, a foreign schema, a column of the wrong type, a ``*`` in a file name, rows
with NULL keys. Each foreign file is skipped with one warning naming it and why; the tables equal
those of the clean directory; dropped rows are counted."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.tables import build_tables
from streamgen.results.records import PairRecord, to_table
from streamgen.results.result_files import file_problem, list_files, literal_glob, readable_files
from tests.support.analysis_fixtures import RecordSet, pair_record, write_record_set

N = 6


def _clean(root: Path) -> Path:
    rows = [pair_record(example_id=f"e{i}", base_quality=0.5, stream_quality=i / N) for i in range(N)]
    return write_record_set(root, RecordSet(rows, []), with_steps=False)


def _summary(root: Path) -> list[tuple[object, ...]]:
    tables = build_tables(root, ["fingerprints", "models"], threads=1)
    fp = tables["fingerprints"].select(["cell_fingerprint", "n_rows", "n_examples", "n_duplicates"])
    return [tuple(r.values()) for r in fp.to_pylist()] + [tuple(r.values()) for r in tables["models"].to_pylist()]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[object, ...]]]:
    root = _clean(tmp_path_factory.mktemp("clean"))
    return root, _summary(root)


def _random_bytes(path: Path) -> None:
    path.write_bytes(os.urandom(2048))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "gone.parquet")


def _foreign_schema(path: Path) -> None:
    pq.write_table(pa.table({"x": [1, 2], "y": ["a", "b"]}), path)


def _wrong_type(path: Path) -> None:
    table = to_table([pair_record(example_id="e99")], PairRecord)
    i = table.schema.get_field_index("base_forwards")
    pq.write_table(table.set_column(i, "base_forwards", pa.array(["ten"])), path)


FOREIGN: dict[str, tuple[Callable[[Path], None], str]] = {
    "random bytes": (_random_bytes, "not a readable Parquet file"),
    "empty": (_empty, "an empty file"),
    "dangling symlink": (_dangling, "a dangling symbolic link"),
    "foreign schema": (_foreign_schema, "a foreign schema: no run_id"),
    "wrong type": (_wrong_type, "column base_forwards is string, the pairs records have int64"),
}


@pytest.mark.parametrize("table", ["pairs", "steps", "runs"])
@pytest.mark.parametrize("kind", list(FOREIGN))
def test_foreign_file_is_skipped_with_one_warning(clean, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                  table: str, kind: str) -> None:
    root, expected = clean
    root = Path(shutil.copytree(root, tmp_path / "r", symlinks=True))
    make, reason = FOREIGN[kind]
    bad = root / table / "m-ar" / "foreign.parquet"
    bad.parent.mkdir(parents=True, exist_ok=True)
    make(bad)
    caplog.set_level(logging.WARNING)
    assert _summary(root) == expected, "the foreign file changed the tables"
    about = [r.getMessage() for r in caplog.records if str(bad) in r.getMessage()]
    assert len(about) == 1, about  # one warning for the file, whatever reads it
    if kind == "wrong type" and table != "pairs":  # a pairs file among the steps or runs
        reason = "a foreign schema: no "
    assert reason in about[0], about[0]
    assert bad in [s.path for s in readable_files(root, table, warn=False).skipped]


def test_star_in_a_file_name_is_literal(clean, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, expected = clean
    root = Path(shutil.copytree(root, tmp_path / "r"))
    part0 = root / "pairs" / "m-ar" / "part-0.parquet"
    part0.rename(part0.with_name("part-*.parquet"))  # as a glob it also matches part-1.parquet
    caplog.set_level(logging.WARNING)
    assert _summary(root) == expected  # in particular n_duplicates stays 0: no file read twice
    assert not [r for r in caplog.records if "repeated" in r.getMessage() or "duplicate" in r.getMessage()]


def test_rows_with_null_keys_are_counted(clean, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, expected = clean
    root = Path(shutil.copytree(root, tmp_path / "r"))
    table = to_table([pair_record(example_id=f"x{i}", run_id="run-2") for i in range(3)], PairRecord)
    schema = pa.schema([f.with_nullable(True) for f in table.schema])
    table = table.cast(schema)
    table = table.set_column(table.schema.get_field_index("example_id"), schema.field("example_id"),
                             pa.array([None, "x1", None], pa.string()))
    fp = table.schema.get_field_index("cell_fingerprint")
    table = table.set_column(fp, schema.field("cell_fingerprint"), pa.array([None, None, None], pa.string()))
    table = table.set_column(table.schema.get_field_index("cell_id"), schema.field("cell_id"),
                             pa.array(["cell", None, "cell"], pa.string()))
    pq.write_table(table, root / "pairs" / "m-ar" / "nulls.parquet")
    caplog.set_level(logging.WARNING)
    assert _summary(root) == expected
    # formula: row 0 and 2 have no example id, row 1 no cell (nor fingerprint): 3 rows left out
    lines = [r.getMessage() for r in caplog.records if "pairs rows left out" in r.getMessage()]
    assert lines == ["3 pairs rows left out: 1 without a cell fingerprint or cell id, 2 without an example id "
                     f"(they belong to no cell/example; not written by streamgen): {root / 'pairs' / 'm-ar' / 'nulls.parquet'}"
                     " (3); move such files out of the results directory"], lines


def test_list_files_walks_names_literally(tmp_path: Path) -> None:
    for name in ("a/[x].parquet", "a/y?.parquet", "b/**.parquet", "b/.hidden.parquet.tmp-1", "b/.x.parquet",
                 "b/notes.txt"):
        (tmp_path / "pairs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pairs" / name).write_text("")
    got = [p.relative_to(tmp_path / "pairs").as_posix() for p in list_files(tmp_path, "pairs")]
    assert got == ["a/[x].parquet", "a/y?.parquet", "b/**.parquet"]
    assert literal_glob("/r/p-*[1]?.parquet") == "/r/p-[*][[]1][?].parquet"
    assert file_problem(tmp_path / "pairs" / "a" / "[x].parquet", "pairs") == "an empty file"


def test_closing_summary_and_dry_run_estimate_survive(clean, tmp_path: Path) -> None:
    from jobs.cluster.dry_run import answer_lengths
    from streamgen.config import grid_config
    from workflows.full_grid import budget_line

    root, _ = clean
    root = Path(shutil.copytree(root, tmp_path / "r"))
    _random_bytes(root / "pairs" / "m-ar" / "junk.parquet")
    _dangling(root / "pairs" / "m-ar" / "link.parquet")
    assert "of 0 rows" in budget_line(grid_config("smoke", [f"results_dir={root}"]))  # no crash
    assert answer_lengths(root) == {}  # the fixture's rows carry no cell_settings; the junk is skipped, not raised
