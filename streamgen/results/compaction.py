"""Compaction: the per-shard result files of a results directory merged into one pairs and one steps file.

The writer keeps one Parquet file per shard and table (atomic, resume by existence); at the study's
size that is 65,271 files, and reading them is what made the report take 25 minutes. A compaction
(at the start and the end of every run, from ``python -m analysis.compact DIR``, and from a reader that
finds many loose shards and no run holding the directory) merges every finished loose shard, under the
results directory's lock, in these steps — a kill at any of them leaves a directory that reads every
row once and that the next compaction finishes (docs/grid.md, 'Compaction'):

1. ``clean``: remove what a killed compaction left: per-shard files of shards the manifest already
   lists, merged files it does not list, temporary files under ``merged/``;
2. ``merged``: stream the loose shards, a chunk at a time, into ``merged/.pairs-<batch>.parquet.tmp``
   and ``merged/.steps-<batch>.parquet.tmp`` (a shard whose files do not carry its own id, or carry
   columns the records do not have, stays loose, as a reader would read it);
3. ``verified``: read the temporary files back: row counts and every shard's row count must match;
   then rename them to their final names (not yet listed anywhere: no reader reads them);
4. ``manifest``: write the manifest with the new batch (atomic): from here readers read the batch and
   skip the shards' per-shard files;
5. ``removed``: delete the per-shard files — unless a reader holds the readers lock
   (``streamgen.results.read_lock``): then they stay, skipped by every reader, until a later compaction.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from streamgen.results.manifest import (
    Batch,
    Manifest,
    ManifestError,
    MergedFile,
    MergedShard,
    batch_problems,
    check_batches,
    fsync_dir,
    merged_dir,
    read_manifest,
    write_manifest,
)
from streamgen.results.read_lock import removal_lock
from streamgen.results.result_files import SCHEMAS, list_files
from streamgen.results.results_dir import ResultsDirError, ResultsDirLocked, ResultsLock, hold

log = logging.getLogger(__name__)

READ_THREADS = 4  # pyarrow releases the GIL while it reads; beyond 4 the Python part of each read bounds it
CHUNK_SHARDS = 2000  # shards per row group: ~8k pairs and ~60k steps rows held at once
AUTO_COMPACT_SHARDS = 256
"""A run, or a reader finding no run holding the directory, compacts from this many loose shards."""
COMPACT_EVERY_SHARDS = 1000
"""A run also compacts while it runs, each time it has written this many shards since the last compaction,
so a run stopped at any point leaves fewer than this many (plus one unit's) per-shard files: the first
report after it compacts them in ~8 s on the 2-core box (docs/grid.md, 'Compaction'), and the run
pauses that long about once per this many shards (hours of decoding at the study's size)."""
STEPS = ("clean", "merged", "verified", "manifest", "removed")


@dataclass(frozen=True)
class LooseShard:
    """A finished shard still in its per-shard files."""

    shard_id: str
    pairs: Path
    steps: Path


@dataclass(frozen=True)
class Compaction:
    """What one compaction did."""

    batch: str | None  # None: nothing to merge
    shards: int
    pairs_rows: int
    steps_rows: int
    left_loose: int  # per-shard files that are not a writer's shard (kept as they are)
    removed: int  # per-shard files deleted (this batch's and leftovers of a killed compaction)


def checkpoint(step: str, batch: str) -> None:
    """Each step's end (tests replace this to kill a compaction there)."""
    log.debug("compaction %s: %s done", batch, step)


def loose_shards(root: str | os.PathLike[str], manifest: Manifest) -> list[LooseShard]:
    """Every pairs file under ``pairs/`` whose steps file exists and whose shard the manifest does not list."""
    root = Path(root)
    out = []
    for path in list_files(root, "pairs"):
        steps = root / "steps" / path.relative_to(root / "pairs")
        if not manifest.holds(path.stem) and steps.is_file():
            out.append(LooseShard(path.stem, path, steps))
    return out


def compact(lock: ResultsLock, *, drop_damaged: bool = False, min_shards: int = 1,
            chunk: int = CHUNK_SHARDS) -> Compaction:
    """Merge every loose finished shard of ``lock.root`` into one new batch (see the module docstring),
    when there are at least ``min_shards`` (a run passes ``AUTO_COMPACT_SHARDS``: a few per-shard files
    read fast, and stay where a small run's tests and users look for them).

    ``drop_damaged`` (a run, which recomputes what is dropped): a batch whose merged files are missing or
    altered leaves the manifest; otherwise it raises :class:`ManifestError` naming the fix.
    """
    if not lock.held:
        raise RuntimeError(f"compaction of {lock.root} needs its lock held")
    root = lock.root
    manifest = _usable(root, read_manifest(root), drop_damaged)
    batch = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    removed = _clean(root, manifest)
    checkpoint("clean", batch)
    todo = loose_shards(root, manifest)
    if not todo or len(todo) < min_shards:
        return Compaction(None, 0, 0, 0, 0, removed)
    paths = {t: merged_dir(root) / f".{t}-{batch}.parquet.tmp" for t in ("pairs", "steps")}
    try:
        merged = _merge(todo, paths, chunk)
        checkpoint("merged", batch)
        files = _verify_and_rename(paths, merged)
        checkpoint("verified", batch)
    finally:
        for tmp in paths.values():
            tmp.unlink(missing_ok=True)
    write_manifest(root, manifest.with_batch(Batch(batch, files["pairs"], files["steps"]), merged.shards))
    checkpoint("manifest", batch)
    done = [s for s in todo if s.shard_id in merged.shards]
    removed += _remove(root, [p for s in done for p in (s.steps, s.pairs)])
    checkpoint("removed", batch)
    log.info("compacted %d shards of %s into batch %s (%d pairs, %d steps rows); %d files left as they are",
             len(done), root, batch, files["pairs"].rows, files["steps"].rows, len(todo) - len(done))
    return Compaction(batch, len(done), files["pairs"].rows, files["steps"].rows, len(todo) - len(done), removed)


def _usable(root: Path, manifest: Manifest, drop_damaged: bool) -> Manifest:
    problems = batch_problems(root, manifest)
    if problems and not drop_damaged:
        check_batches(root, manifest)
    if problems:
        log.warning("%s; dropping %d batches from the manifest: their shards are recomputed",
                    "; ".join(problems.values()), len(problems))
        manifest = manifest.without_batches(set(problems))
        write_manifest(root, manifest)
    return manifest


def _clean(root: Path, manifest: Manifest) -> int:
    """Remove the leftovers of a killed compaction (step 1); returns how many per-shard files went."""
    listed = {f.name for b in manifest.batches.values() for f in (b.pairs, b.steps)}
    folder = merged_dir(root)
    if folder.is_dir():
        for path in folder.iterdir():
            ours = path.name.startswith((".pairs-", ".steps-", ".manifest.json.tmp-", "pairs-", "steps-"))
            if ours and path.name not in listed:
                path.unlink()
    stale = [p for t in ("pairs", "steps") for p in list_files(root, t) if manifest.holds(p.stem)]
    return _remove(root, stale)


def _remove(root: Path, paths: Sequence[Path]) -> int:
    """Delete per-shard files the manifest covers, unless a reader is reading (it may have listed them
    before the manifest changed: ``read_lock``); then they stay, skipped by readers, until the next
    compaction. Returns how many went."""
    if not paths:
        return 0
    with removal_lock(root) as free:
        if not free:
            log.info("%s: %d merged per-shard files kept while a reader reads; the next compaction removes them",
                     root, len(paths))
            return 0
        for path in paths:
            path.unlink(missing_ok=True)
    return len(paths)


@dataclass
class _Merged:
    shards: dict[str, MergedShard]
    counts: dict[str, Counter[str]]  # table → shard id → rows written


def _merge(todo: list[LooseShard], paths: dict[str, Path], chunk: int) -> _Merged:
    """Stream the shards' rows into the temporary files, ``chunk`` shards per row group."""
    merged = _Merged({}, {"pairs": Counter(), "steps": Counter()})
    paths["pairs"].parent.mkdir(parents=True, exist_ok=True)
    writers = {t: pq.ParquetWriter(p, SCHEMAS[t]) for t, p in paths.items()}
    try:
        with ThreadPoolExecutor(READ_THREADS) as pool:
            for start in range(0, len(todo), chunk):
                _merge_chunk(todo[start:start + chunk], pool, writers, merged)
    finally:
        for w in writers.values():
            w.close()
    return merged


def _merge_chunk(shards: list[LooseShard], pool: ThreadPoolExecutor, writers: dict[str, pq.ParquetWriter],
                 merged: _Merged) -> None:
    """One row group per table: ``shards``' rows, read on ``pool``; at most one chunk held at once."""
    tables: dict[str, list[pa.Table]] = {"pairs": [], "steps": []}
    for shard, pairs, steps in _readable(shards, pool):
        tables["pairs"].append(pairs)
        tables["steps"].append(steps)
        ids = tuple(pairs.column("example_id").to_pylist())
        merged.shards[shard.shard_id] = MergedShard("", ids)
        merged.counts["pairs"][shard.shard_id] += pairs.num_rows
        merged.counts["steps"][shard.shard_id] += steps.num_rows
    for table, parts in tables.items():
        if parts:
            writers[table].write_table(pa.concat_tables(parts))


def _readable(shards: list[LooseShard], pool: ThreadPoolExecutor) -> Iterator[tuple[LooseShard, pa.Table, pa.Table]]:
    """Each shard's two tables in the record schemas, read on ``pool`` (in order); a shard that is not a
    writer's shard is skipped."""
    for shard, read in zip(shards, pool.map(_read_shard, shards), strict=True):
        if isinstance(read, Exception):
            log.info("leaving %s as it is: %s", shard.pairs, read)
            continue
        yield shard, *read


def _read_shard(shard: LooseShard) -> tuple[pa.Table, pa.Table] | Exception:
    """One shard's two files (no dataset layer: ~3× faster; no Arrow threads for a file of a few kB)."""
    try:
        pairs, steps = (_as_record(pq.ParquetFile(p).read(use_threads=False), t, shard.shard_id)
                        for p, t in ((shard.pairs, "pairs"), (shard.steps, "steps")))
    except (OSError, KeyError, pa.ArrowException, _NotAShard) as exc:
        return exc
    return pairs, steps


class _NotAShard(ValueError):
    """A per-shard file that the writer did not write as one shard's file."""


def _as_record(table: pa.Table, name: str, shard_id: str) -> pa.Table:
    """``table`` in the record schema (missing optional columns null, compatible types cast)."""
    schema = SCHEMAS[name]
    extra = set(table.schema.names) - set(schema.names)
    if extra:
        raise _NotAShard(f"columns {sorted(extra)} that the {name} records do not have")
    if set(table.column("shard_id").unique().to_pylist()) != {shard_id}:
        raise _NotAShard(f"rows not all of shard {shard_id}")
    cols = [table.column(f.name).cast(f.type) if f.name in table.schema.names else pa.nulls(table.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def _verify_and_rename(paths: dict[str, Path], merged: _Merged) -> dict[str, MergedFile]:
    """Read each temporary file back, check every shard's rows are in it, then give it its final name."""
    for table, tmp in paths.items():  # both files checked before either is renamed: a failure leaves none
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        got = Counter(pq.read_table(tmp, columns=["shard_id"]).column("shard_id").to_pylist())
        if got != merged.counts[table]:
            raise ManifestError(f"the merged {table} file {tmp} does not read back as written "
                                f"({sum(got.values())} rows, {sum(merged.counts[table].values())} written); "
                                "nothing was changed. Fix: check the disk, then rerun the compaction")
    files: dict[str, MergedFile] = {}
    for table, tmp in paths.items():
        final = tmp.with_name(tmp.name[1:].removesuffix(".tmp"))
        os.replace(tmp, final)
        files[table] = MergedFile(final.name, final.stat().st_size, sum(merged.counts[table].values()))
    fsync_dir(next(iter(paths.values())).parent)
    batch = files["pairs"].name.removeprefix("pairs-").removesuffix(".parquet")
    merged.shards = {sid: MergedShard(batch, m.example_ids) for sid, m in merged.shards.items()}
    return files


def compact_if_idle(root: str | os.PathLike[str], *, min_shards: int = AUTO_COMPACT_SHARDS) -> Compaction | None:
    """Compact ``root`` when it has ``min_shards`` loose shards or more and no run holds it; a directory
    in use or read-only is left as it is (read as it is: correct, slow at 10^4 files) with one log line."""
    root = Path(root)
    if not (root / "pairs").is_dir():
        return None
    loose = len(loose_shards(root, read_manifest(root)))
    if loose < min_shards:
        return None
    try:
        with hold(root, f"compaction-{os.getpid()}") as lock:
            return compact(lock, min_shards=min_shards)
    except ResultsDirLocked:
        log.info("%s: %d shards in per-shard files and a run holds the directory: read as they are "
                 "(the run compacts them when it ends)", root, loose)
    except ResultsDirError as exc:
        log.warning("%s: %d shards in per-shard files are read as they are (slow at 10^4 files): the directory "
                    "cannot be compacted here: %s", root, loose, exc)
    return None
