"""The data manifest: every benchmark data file's source, licence and sha256, checked on every read.

A data directory (the repository's ``data/`` by default) holds ``MANIFEST.tsv``: tab-separated, one
line per file, header ``dataset file rows bytes sha256 license upstream``. :func:`verified_bytes`
reads a file and refuses it (:class:`BenchmarkDataError` naming the file and the fix) when it is not
listed or its sha256 differs, so a changed file can never silently change results.

A benchmark's data files are its ``data_file`` plus every ``options.*_file`` (e.g. chat's
``answers_file``). :func:`data_version` stamps their sha256 prefixes onto the YAML ``version``
(``"1+b796127e"``): that string is the rows' ``benchmark_version`` and part of every shard id, so a
changed data file gives new shards instead of reusing old ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from streamgen.benchmarks.base import BenchmarkDataError
from streamgen.config import BenchmarkConfig

logger = logging.getLogger(__name__)

MANIFEST_NAME = "MANIFEST.tsv"
COLUMNS = ("dataset", "file", "rows", "bytes", "sha256", "license", "upstream")
SHA_PREFIX = 8  # hex characters of each file's sha256 in the data version
DOC_FILES = ("MANIFEST.tsv", "README.md", "SOURCE.md")  # documentation, not data: not listed


@dataclass(frozen=True)
class ManifestEntry:
    """One data file as the manifest records it (``file`` is relative to the data directory)."""

    dataset: str
    file: str
    sha256: str
    license: str
    upstream: str


def read_manifest(data_dir: Path) -> dict[str, ManifestEntry]:
    """``MANIFEST.tsv`` of ``data_dir`` by relative file name; a missing or malformed one raises."""
    path = Path(data_dir) / MANIFEST_NAME
    if not path.is_file():
        raise BenchmarkDataError(
            f"data directory {data_dir} has no {MANIFEST_NAME} listing its files with their sha256: use the "
            f"repository's data/ (the default), or write one (tab-separated header: {' '.join(COLUMNS)})")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or tuple(lines[0].split("\t")) != COLUMNS:
        raise BenchmarkDataError(f"{path}: the first line must be the tab-separated header {' '.join(COLUMNS)}")
    entries: dict[str, ManifestEntry] = {}
    for n, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        if len(cells) != len(COLUMNS) or len(cells[4]) != 64:
            raise BenchmarkDataError(f"{path} line {n}: expected {len(COLUMNS)} tab-separated columns "
                                     f"({' '.join(COLUMNS)}) with a 64-hex sha256, got {line!r}")
        row = dict(zip(COLUMNS, cells, strict=True))
        entries[row["file"]] = ManifestEntry(row["dataset"], row["file"], row["sha256"], row["license"],
                                             row["upstream"])
    return entries


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_bytes(data_dir: Path, relative: str, data: bytes, manifest: dict[str, ManifestEntry]) -> str:
    """The sha256 of ``data`` (the content of ``data_dir/relative``); raises unless the manifest agrees."""
    actual = sha256_hex(data)
    entry = manifest.get(relative)
    where = Path(data_dir) / MANIFEST_NAME
    if entry is None:
        raise BenchmarkDataError(
            f"benchmark data file {relative} is not listed in {where}: add its line (dataset, file, rows, "
            f"bytes, sha256 {actual}, license, upstream) naming where it came from and its licence")
    if entry.sha256 != actual:
        raise BenchmarkDataError(
            f"benchmark data file {relative} in {data_dir} has changed: its sha256 is {actual}, {where} "
            f"lists {entry.sha256}. Restore it (in a checkout: git checkout -- data/{relative}); if the "
            f"change is deliberate, write the new sha256 into its {MANIFEST_NAME} line (the benchmark's "
            "version, and so its shard ids, change with it)")
    return actual


def verified_bytes(data_dir: Path, relative: str) -> bytes:
    """The bytes of ``data_dir/relative`` after checking them against the directory's manifest."""
    path = Path(data_dir) / relative
    if not path.is_file():
        raise BenchmarkDataError(
            f"benchmark data file {path} is missing: set data_dir= (or STREAMGEN_DATA_DIR) to a folder "
            "holding the benchmark data and its MANIFEST.tsv; the default is the repository's data/")
    data = path.read_bytes()
    check_bytes(data_dir, relative, data, read_manifest(data_dir))
    return data


def data_files(cfg: BenchmarkConfig) -> tuple[str, ...]:
    """The files a local benchmark reads: ``data_file`` and every ``options.*_file``, in that order."""
    extra = [str(v) for k, v in sorted(cfg.options.items()) if k.endswith("_file") and v]
    return (cfg.data_file, *extra)


def data_version(cfg: BenchmarkConfig, data_dir: Path) -> str:
    """``<yaml version>+<sha256 prefix of each data file, joined by '.'>``; the YAML version for hub data;
    an lm-eval task's own (its YAML folder and data files, :func:`streamgen.benchmarks.lm_eval_task.task_version`)."""
    if cfg.source == "lm_eval":
        from streamgen.benchmarks.lm_eval_task import task_version

        return task_version(cfg)
    if cfg.source != "local":
        return cfg.version
    manifest = read_manifest(data_dir)
    shas = [check_bytes(data_dir, rel, (Path(data_dir) / rel).read_bytes(), manifest)[:SHA_PREFIX]
            for rel in data_files(cfg)]
    return f"{cfg.version}+{'.'.join(shas)}"


def versioned(cfg: BenchmarkConfig, data_dir: Path) -> BenchmarkConfig:
    """``cfg`` with :func:`data_version` as its version (what the grid's cells and rows carry)."""
    return dataclasses.replace(cfg, version=data_version(cfg, data_dir))


def verify_directory(data_dir: Path) -> list[str]:
    """Every problem with ``data_dir``: listed files missing or changed, data files not listed."""
    manifest = read_manifest(data_dir)
    problems = []
    for rel in manifest:
        try:
            path = Path(data_dir) / rel
            if not path.is_file():
                problems.append(f"{rel}: listed in {MANIFEST_NAME} but missing")
                continue
            check_bytes(data_dir, rel, path.read_bytes(), manifest)
        except BenchmarkDataError as exc:
            problems.append(str(exc))
    for path in sorted(Path(data_dir).rglob("*")):
        rel = path.relative_to(data_dir).as_posix()
        if path.is_file() and path.name not in DOC_FILES and rel not in manifest:
            problems.append(f"{rel}: a file in {data_dir} that {MANIFEST_NAME} does not list")
    return problems
