"""The manifest of a results directory's merged files: which merged file holds which shard.

``<results_dir>/merged/manifest.json`` (written by ``streamgen.results.compaction``, always whole: a
temporary name, fsync, rename) lists each merge *batch* — one pairs file and one steps file under
``merged/``, with their sizes and row counts — and, per shard id, the batch that holds its rows and its
example ids. It is the one authority on merged shards:

- a reader takes the pairs and steps rows of a shard the manifest lists from its batch's files only,
  and skips any per-shard file of that shard still lying under ``pairs/`` or ``steps/`` (a compaction
  killed after writing the manifest, before removing them); a merged file the manifest does not list
  (a compaction killed before writing it) is never read. So no row is read twice or lost, whatever
  step a compaction died at (docs/grid.md, 'Compaction').
- resume (``jobs.run.writer``) counts a listed shard as done from the manifest alone: its example ids and
  its batch's files present at their recorded sizes; nothing is read in full.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

MERGED_DIR = "merged"
MANIFEST_NAME = "manifest.json"
FORMAT = 1
TABLES = ("pairs", "steps")


class ManifestError(RuntimeError):
    """The manifest or a merged file it lists is unreadable, missing or altered; the message names the fix."""


@dataclass(frozen=True)
class MergedFile:
    name: str  # file name under merged/
    bytes: int
    rows: int


@dataclass(frozen=True)
class Batch:
    """One compaction's output: a pairs file and a steps file."""

    name: str
    pairs: MergedFile
    steps: MergedFile

    def file(self, table: str) -> MergedFile:
        return self.pairs if table == "pairs" else self.steps


@dataclass(frozen=True)
class MergedShard:
    batch: str
    example_ids: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    """Every merge batch and every merged shard of one results directory (empty: nothing merged yet)."""

    batches: Mapping[str, Batch] = field(default_factory=dict)
    shards: Mapping[str, MergedShard] = field(default_factory=dict)

    def holds(self, shard_id: str) -> bool:
        return shard_id in self.shards

    def files(self, root: str | os.PathLike[str], table: str) -> tuple[Path, ...]:
        """The merged ``table`` files, in batch order."""
        return tuple(merged_dir(root) / b.file(table).name for b in self.batches.values())

    def with_batch(self, batch: Batch, shards: Mapping[str, MergedShard]) -> Manifest:
        return Manifest({**self.batches, batch.name: batch}, {**self.shards, **shards})

    def without_batches(self, names: set[str]) -> Manifest:
        return Manifest({k: b for k, b in self.batches.items() if k not in names},
                        {s: m for s, m in self.shards.items() if m.batch not in names})


def merged_dir(root: str | os.PathLike[str]) -> Path:
    return Path(root) / MERGED_DIR


def manifest_path(root: str | os.PathLike[str]) -> Path:
    return merged_dir(root) / MANIFEST_NAME


def read_manifest(root: str | os.PathLike[str]) -> Manifest:
    """The manifest of ``root`` (an empty one when nothing was merged); raises :class:`ManifestError`."""
    path = manifest_path(root)
    if not path.exists():
        return Manifest()
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, this code reads format {FORMAT}")
        batches = {name: Batch(name, MergedFile(**b["pairs"]), MergedFile(**b["steps"]))
                   for name, b in data["batches"].items()}
        shards = {sid: MergedShard(s[0], tuple(s[1])) for sid, s in data["shards"].items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ManifestError(
            f"{path} cannot be read ({type(exc).__name__}: {exc}); it is the only record of which merged file "
            f"holds which shard. Fix: restore it from a backup of {merged_dir(root)}, or move {merged_dir(root)} "
            f"aside and rerun the grid to recompute the shards it held") from exc
    return Manifest(batches, shards)


def write_manifest(root: str | os.PathLike[str], manifest: Manifest) -> Path:
    """Replace the manifest whole (temporary name, fsync, rename): a reader sees the old or the new one."""
    path = manifest_path(root)
    data = {
        "format": FORMAT,
        "batches": {n: {t: vars(b.file(t)) for t in TABLES} for n, b in manifest.batches.items()},
        "shards": {sid: [m.batch, list(m.example_ids)] for sid, m in sorted(manifest.shards.items())},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w") as fh:
            json.dump(data, fh, separators=(",", ":"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (its directory entry reaches the disk)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def batch_problems(root: str | os.PathLike[str], manifest: Manifest) -> dict[str, str]:
    """Batch name → why its files cannot be trusted (missing, or not the size the manifest recorded)."""
    problems: dict[str, str] = {}
    for batch in manifest.batches.values():
        for table in TABLES:
            f = batch.file(table)
            path = merged_dir(root) / f.name
            size = path.stat().st_size if path.is_file() else None
            if size != f.bytes:
                problems[batch.name] = (f"{path} is missing" if size is None else
                                        f"{path} has {size} bytes, the manifest recorded {f.bytes}")
                break
    return problems


def check_batches(root: str | os.PathLike[str], manifest: Manifest) -> None:
    """Raise :class:`ManifestError` naming the fix when a merged file the manifest lists is damaged."""
    problems = batch_problems(root, manifest)
    if problems:
        n = sum(m.batch in problems for m in manifest.shards.values())
        raise ManifestError(
            f"{'; '.join(problems.values())}: the rows of {n} shards are in it. Fix: restore the file, or rerun "
            f"the grid on {root} (the run drops the damaged batch from the manifest and recomputes its shards)")
