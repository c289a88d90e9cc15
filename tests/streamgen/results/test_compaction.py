"""Compaction (streamgen/results/compaction.py): the per-shard files merged under a manifest, every row read
once at every step a compaction can die at, resume from the manifest alone, the same report before and after.

The reference here is deliberately simple: every row of every per-shard file, read one file at a time
before any compaction, against every row a reader lists afterwards (``readable_files``: the merged files
the manifest names plus the per-shard files it does not cover).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.cluster.dry_run import _cell_lines
from jobs.run.writer import ResultWriter
from streamgen.results import compaction
from streamgen.results.manifest import ManifestError, manifest_path, merged_dir, read_manifest
from streamgen.results.result_files import list_files, readable_files
from streamgen.results.results_dir import ResultsDirLocked, hold
from tests.support.view_support import scripted_plan, scripted_results

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scripted grid's results as the writer leaves them (plus one file that is no shard's)."""
    return scripted_results(tmp_path_factory.mktemp("scripted") / "r")


def _copy(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst))


def _rows(files: tuple[Path, ...] | list[Path]) -> list[tuple]:
    """Every row of ``files`` as a sorted list of tuples (the id columns first)."""
    rows = []
    for f in files:
        table = pq.read_table(f)
        rows += [tuple(sorted(r.items())) for r in table.to_pylist()]
    return sorted(rows, key=repr)


def _reader_rows(root: Path, table: str) -> list[tuple]:
    return _rows(readable_files(root, table, warn=False).files)


def _compact(root: Path) -> compaction.Compaction:
    with hold(root, "test") as lock:
        return compaction.compact(lock)


def test_compaction_keeps_every_row_once_and_lists_the_shards(scripted: Path, tmp_path: Path) -> None:
    root = _copy(scripted, tmp_path / "r")
    before = {t: _rows(list_files(root, t)) for t in ("pairs", "steps")}
    shard_files = [p for p in list_files(root, "pairs") if p.parent.name.startswith("benchmark=")]
    done = _compact(root)
    assert done.shards == len(shard_files) > 1  # extra/error.parquet (no steps file) is no shard's file
    assert list_files(root, "pairs") == [root / "pairs" / "extra" / "error.parquet"]
    assert list_files(root, "steps") == []
    manifest = read_manifest(root)
    assert set(manifest.shards) == {p.stem for p in shard_files}
    for t in ("pairs", "steps"):
        assert _reader_rows(root, t) == before[t]
    assert _compact(root).batch is None  # nothing left to merge: no empty batch


def test_report_csvs_identical_after_compaction(scripted: Path, tmp_path: Path) -> None:
    from analysis.report import write_report

    root = _copy(scripted, tmp_path / "r")
    old = write_report(root, out_dir=tmp_path / "old", with_figures=False)
    _compact(root)
    assert (merged_dir(root) / "manifest.json").exists()
    new = write_report(root, out_dir=tmp_path / "new", with_figures=False)
    assert [p.name for p in old.csv_paths] == [p.name for p in new.csv_paths]
    for a, b in zip(old.csv_paths, new.csv_paths, strict=True):
        assert a.read_text() == b.read_text(), a.name


_KILLER = """
import os, signal, sys
from streamgen.results import compaction
from streamgen.results.results_dir import hold
step = sys.argv[2]
def die(name, batch):
    if name == step:
        os.kill(os.getpid(), signal.SIGKILL)
compaction.checkpoint = die
with hold(sys.argv[1], "test") as lock:
    compaction.compact(lock, chunk=2)
"""


@pytest.mark.parametrize("step", compaction.STEPS)
def test_killed_at_each_step_reads_every_row_once_and_resumes(scripted: Path, tmp_path: Path, step: str) -> None:
    root = _copy(scripted, tmp_path / "r")
    before = {t: _rows(list_files(root, t)) for t in ("pairs", "steps")}
    proc = subprocess.run([sys.executable, "-c", _KILLER, str(root), step], cwd=ROOT, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    listed = manifest_path(root).exists()
    assert listed == (step in ("manifest", "removed"))  # the path: killed before or after the manifest
    for t in ("pairs", "steps"):
        assert _reader_rows(root, t) == before[t], f"killed after {step}: {t} rows differ"
    plan = scripted_plan(root)
    assert all(ResultWriter(root).is_complete(s) for s in plan.shards)
    _compact(root)  # the next compaction finishes the job
    assert sorted(p.name for p in merged_dir(root).iterdir()) == sorted(
        ["manifest.json", *(f.name for b in read_manifest(root).batches.values() for f in (b.pairs, b.steps))])
    assert len(read_manifest(root).batches) == 1
    assert list_files(root, "steps") == []
    for t in ("pairs", "steps"):
        assert _reader_rows(root, t) == before[t]


def test_resume_and_dry_run_recognise_merged_shards_from_the_manifest(scripted: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(scripted, tmp_path / "r")
    _compact(root)
    plan = scripted_plan(root)

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("resume read a result file")

    monkeypatch.setattr(pq, "read_table", no_reading)
    monkeypatch.setattr(pq, "read_schema", no_reading)
    writer = ResultWriter(root)
    assert all(writer.is_done(s) for s in plan.shards)
    lines = _cell_lines(plan, root)
    assert sum(c.shards_done for c in lines) == sum(c.shards for c in lines) == len(plan.shards)


def test_a_run_drops_a_damaged_batch_and_recomputes_its_shards(scripted: Path, tmp_path: Path) -> None:
    root = _copy(scripted, tmp_path / "r")
    _compact(root)
    (merged_dir(root) / next(iter(read_manifest(root).batches.values())).steps.name).write_bytes(b"cut")
    plan = scripted_plan(root)
    assert not any(ResultWriter(root).is_done(s) for s in plan.shards)  # recomputed, never half-trusted
    with hold(root, "run") as lock:
        compaction.compact(lock, drop_damaged=True)
    assert read_manifest(root).shards == {}


def test_damaged_merged_file_or_manifest_is_one_error_line_naming_the_fix(
        scripted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from analysis.report import main

    root = _copy(scripted, tmp_path / "r")
    _compact(root)
    batch = next(iter(read_manifest(root).batches.values()))
    (merged_dir(root) / batch.pairs.name).unlink()
    assert main([str(root), "--no-figures", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is missing" in err[0] and "Fix: restore the file, or rerun the grid" in err[0]
    manifest_path(root).write_text("{not json")
    with pytest.raises(ManifestError, match="Fix: restore it from a backup"):
        read_manifest(root)


def test_a_foreign_file_among_shard_files_stays_as_it_is(scripted: Path, tmp_path: Path) -> None:
    root = _copy(scripted, tmp_path / "r")
    shard = next(p for p in list_files(root, "pairs") if p.parent.name.startswith("benchmark="))
    other = shard.with_name("0000000000000000.parquet")  # a shard's name, another shard's rows
    shutil.copy(shard, other)
    shutil.copy(root / "steps" / shard.relative_to(root / "pairs"), root / "steps" / other.relative_to(root / "pairs"))
    done = _compact(root)
    assert done.left_loose == 1 and other.exists()
    assert other in readable_files(root, "pairs", warn=False).files


def test_a_reader_does_not_compact_a_directory_a_run_holds(scripted: Path, tmp_path: Path) -> None:
    root = _copy(scripted, tmp_path / "r")
    with hold(root, "live-run"):
        assert compaction.compact_if_idle(root, min_shards=1) is None
        with pytest.raises(ResultsDirLocked):
            _compact(root)
    assert not manifest_path(root).exists()
    done = compaction.compact_if_idle(root, min_shards=1)
    assert done is not None and done.shards > 1


def test_merged_rows_keep_the_record_schema(scripted: Path, tmp_path: Path) -> None:
    from streamgen.results.records import PAIRS_SCHEMA, STEPS_SCHEMA

    root = _copy(scripted, tmp_path / "r")
    _compact(root)
    batch = next(iter(read_manifest(root).batches.values()))
    for name, schema in ((batch.pairs.name, PAIRS_SCHEMA), (batch.steps.name, STEPS_SCHEMA)):
        got = pq.read_schema(merged_dir(root) / name)
        assert pa.schema(list(got)) == pa.schema(list(schema))
