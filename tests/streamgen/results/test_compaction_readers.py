"""Compaction against readers and a failed read-back (streamgen/results/compaction.py, read_lock.py).

- A reader that listed its files before a compaction (in another process) wrote its manifest still reads
  every row once: the compaction keeps the per-shard files while the reader holds the readers lock, and
  the next compaction removes them.
- The ``verified`` step's read-back failing changes nothing: no manifest, no merged file, every original
  per-shard file in place, every row read once.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis.tables import connect_keyed
from streamgen.results import compaction
from streamgen.results.manifest import ManifestError, manifest_path, merged_dir, read_manifest
from streamgen.results.result_files import list_files, readable_files
from streamgen.results.results_dir import hold
from tests.support.view_support import scripted_results

ROOT = Path(__file__).resolve().parents[3]
_COMPACT = ("import sys; from streamgen.results import compaction; from streamgen.results.results_dir import hold\n"
            "with hold(sys.argv[1], 'other') as lock: print(compaction.compact(lock).removed)")


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_results(tmp_path_factory.mktemp("scripted") / "r")


def _count(files: list[Path] | tuple[Path, ...]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def test_a_reader_never_finds_a_file_gone_that_a_compaction_merged(scripted: Path, tmp_path: Path) -> None:
    root = Path(shutil.copytree(scripted, tmp_path / "r"))
    rows = {t: _count(list_files(root, t)) for t in ("pairs", "steps")}
    con = connect_keyed(root)  # lists the per-shard files now, reads them lazily below
    proc = subprocess.run([sys.executable, "-c", _COMPACT, str(root)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "0"  # merged and listed, but nothing deleted under a reader
    assert read_manifest(root).shards
    assert con.execute("SELECT count(*) FROM steps").fetchone() == (rows["steps"],)
    assert con.execute("SELECT count(*) FROM pairs_files").fetchone() == (rows["pairs"],)
    del con
    gc.collect()
    with hold(root, "next") as lock:
        assert compaction.compact(lock).removed > 0  # the reader gone, the leftovers go
    assert list_files(root, "steps") == []
    for t in ("pairs", "steps"):
        assert _count(readable_files(root, t, warn=False).files) == rows[t]


def test_a_failed_read_back_leaves_every_original_and_no_manifest(scripted: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(shutil.copytree(scripted, tmp_path / "r"))
    before = {t: list_files(root, t) for t in ("pairs", "steps")}
    rows = {t: _count(before[t]) for t in ("pairs", "steps")}

    def cut(step: str, batch: str) -> None:  # the disk loses the steps file's last row group
        if step == "merged":
            tmp = merged_dir(root) / f".steps-{batch}.parquet.tmp"
            pq.write_table(pq.ParquetFile(tmp).read_row_group(0), tmp)

    monkeypatch.setattr(compaction, "checkpoint", cut)
    with hold(root, "test") as lock, pytest.raises(ManifestError, match="does not read back as written"):
        compaction.compact(lock, chunk=2)
    assert not manifest_path(root).exists()
    assert [p.name for p in merged_dir(root).iterdir()] == []
    assert {t: list_files(root, t) for t in ("pairs", "steps")} == before
    for t in ("pairs", "steps"):
        assert _count(readable_files(root, t, warn=False).files) == rows[t]
