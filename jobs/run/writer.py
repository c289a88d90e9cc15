"""Result files: one Parquet file per finished shard per table, written atomically; resume checks.

Layout (docs/design.md, 'Records')::

    <results_dir>/pairs/model=<m>/benchmark=<b>/<shard_id>.parquet
    <results_dir>/steps/model=<m>/benchmark=<b>/<shard_id>.parquet
    <results_dir>/runs/<run_id>.parquet
    <results_dir>/config/<run_id>.yaml

The steps file is written first and the pairs file last, so an existing, valid pairs file means the
shard is complete. A shard counts as done only if both files read back, have the record schema, and
the pairs file holds exactly the shard's example ids once each under its shard id. Anything else
(truncated, corrupted, partial) is removed and recomputed. The check reads each file's footer and the
pairs file's two id columns, not the rows.

A shard that a compaction merged (``streamgen.results.compaction``) is done when the manifest lists it with
exactly the shard's example ids and its batch's files are present at their recorded sizes: decided from
the manifest alone, read once per writer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from jobs.grid.shards import Shard
from streamgen.results.manifest import (
    MERGED_DIR,
    Manifest,
    ManifestError,
    batch_problems,
    manifest_path,
    read_manifest,
)
from streamgen.results.records import (
    PairRecord,
    RunRecord,
    StepRecord,
    read_columns_validated,
    to_table,
    write_parquet_atomic,
)
from streamgen.results.results_dir import ResultsLock, named_io_errors

log = logging.getLogger(__name__)

# pyarrow raises these for unreadable files; ValueError also covers our schema check.
DAMAGE_ERRORS = (OSError, ValueError, pa.ArrowException)


@dataclass(frozen=True)
class ShardPaths:
    pairs: Path
    steps: Path


class ResultWriter:
    """Writes and checks the result files of one results directory."""

    def __init__(self, results_dir: str | Path) -> None:
        self.root = Path(results_dir)
        self._manifest: Manifest | None = None
        self._damaged: dict[str, str] = {}

    @property
    def manifest(self) -> Manifest:
        """The merged shards (read on first use; a compaction in this process calls :meth:`reload`)."""
        if self._manifest is None:
            self._manifest = read_manifest(self.root)
            self._damaged = batch_problems(self.root, self._manifest)
        return self._manifest

    def reload(self) -> None:
        self._manifest = None

    def merged(self, shard: Shard) -> bool:
        """True if the manifest lists the shard with its example ids, its batch intact; raises
        ManifestError when it lists other example ids (the manifest was edited: ids are content hashes)."""
        entry = self.manifest.shards.get(shard.shard_id)
        if entry is None or entry.batch in self._damaged:
            return False
        if sorted(entry.example_ids) != sorted(shard.example_ids):
            raise ManifestError(f"{manifest_path(self.root)} lists shard {shard.shard_id} with examples "
                                f"{sorted(entry.example_ids)}, the plan has {sorted(shard.example_ids)}. Fix: "
                                "restore the manifest the compaction wrote (it is never edited by hand)")
        return True

    def paths(self, shard: Shard) -> ShardPaths:
        part = Path(f"model={shard.cell.model.name}") / f"benchmark={shard.cell.benchmark.name}"
        name = f"{shard.shard_id}.parquet"
        return ShardPaths(self.root / "pairs" / part / name, self.root / "steps" / part / name)

    def write_shard(self, shard: Shard, pairs: Sequence[PairRecord], steps: Sequence[StepRecord]) -> ShardPaths:
        """Write the shard's steps, then its pairs (the completion marker), each atomically."""
        problem = _pairs_problem(shard, [p.example_id for p in pairs], [p.shard_id for p in pairs])
        if problem:
            raise ValueError(f"refusing to write shard {shard.shard_id}: {problem}")
        paths = self.paths(shard)
        with named_io_errors(paths.steps):  # the atomic write leaves no partial file behind
            write_parquet_atomic(to_table(list(steps), StepRecord), paths.steps)
        with named_io_errors(paths.pairs):
            write_parquet_atomic(to_table(list(pairs), PairRecord), paths.pairs)
        return paths

    def is_done(self, shard: Shard) -> bool:
        """True if the shard's files exist and validate; damaged or partial files are removed."""
        if self.merged(shard):
            return True
        paths = self.paths(shard)
        if not paths.pairs.exists():
            if paths.steps.exists():  # killed between the two writes: recompute
                paths.steps.unlink()
            return False
        problem = self._problem(shard, paths)
        if problem is None:
            return True
        log.warning("shard %s: %s; removing its files and recomputing it", shard.shard_id, problem)
        for p in (paths.pairs, paths.steps):
            p.unlink(missing_ok=True)
        return False

    def is_complete(self, shard: Shard) -> bool:
        """Like :meth:`is_done`, but read-only: damaged files are left alone (for ``--dry-run``)."""
        if self.merged(shard):
            return True
        paths = self.paths(shard)
        return paths.pairs.exists() and self._problem(shard, paths) is None

    def _problem(self, shard: Shard, paths: ShardPaths) -> str | None:
        try:
            pairs = read_columns_validated(paths.pairs, PairRecord, ("example_id", "shard_id"))
            steps = read_columns_validated(paths.steps, StepRecord, ("shard_id",))
        except DAMAGE_ERRORS as exc:
            return f"unreadable result file ({type(exc).__name__}: {exc})"
        problem = _pairs_problem(shard, pairs.column("example_id").to_pylist(),
                                 pairs.column("shard_id").to_pylist())
        if problem:
            return problem
        if set(steps.column("shard_id").unique().to_pylist()) - {shard.shard_id}:
            return "steps file holds rows of another shard"
        return None

    def remove_stale_temp_files(self, lock: ResultsLock) -> int:
        """Delete temporary files a killed writer left behind (``.<name>.tmp-<hex>``); returns how many.

        Only under the results directory's lock (:mod:`streamgen.results.results_dir`): a live run's temp files
        are its shards in flight.
        """
        if not lock.held or lock.root.resolve() != self.root.resolve():
            raise RuntimeError(f"remove_stale_temp_files needs the lock of {self.root}, not of {lock.root}")
        stale = [p for table in ("pairs", "steps", "runs", MERGED_DIR) for p in (self.root / table).rglob(".*.tmp*")]
        for p in stale:
            p.unlink(missing_ok=True)
        return len(stale)

    def write_run(self, run: RunRecord) -> Path:
        path = self.root / "runs" / f"{run.run_id}.parquet"
        with named_io_errors(path):
            return write_parquet_atomic(to_table([run], RunRecord), path)

    def write_config(self, run_id: str, text: str) -> Path:
        path = self.root / "config" / f"{run_id}.yaml"
        tmp = path.with_suffix(".yaml.tmp")
        with named_io_errors(path):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_text(text)
                tmp.replace(path)
            finally:
                if tmp.exists():
                    tmp.unlink()
        return path


def _pairs_problem(shard: Shard, example_ids: list[str], shard_ids: list[str]) -> str | None:
    if sorted(example_ids) != sorted(shard.example_ids):
        return f"rows for examples {sorted(example_ids)} but the shard has {sorted(shard.example_ids)}"
    if set(shard_ids) - {shard.shard_id}:
        return "rows carry another shard id"
    return None
