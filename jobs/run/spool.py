"""The spool of a work unit: each example's decoded results, persisted by the model actor as soon as
the example's pair (base + stream, every cell of the unit) has run, so a unit killed mid-way (unit
timeout, Slurm time limit or preemption, a dead actor) resumes from its finished examples.

One file per unit, ``<results_dir>/spool/<first shard id>.jsonl``, one JSON line per finished
example, appended and fsynced. A line carries the unit's shard ids, the example id, the device label
and code version it was decoded with, and the unit's results for that example (one
:class:`~jobs.grid.shard_tasks.ExampleResult` per shard, pickled, base64) with their sha256. A line is reused
only if all of those match the unit being run and its checksum holds; anything else (a truncated or
corrupt line, a stale or foreign unit, another device or code version) is skipped with ONE warning
naming the file, and that example is decoded again. The driver removes the file once the unit's
shard files are written (``docs/grid.md``, "Resume inside a unit").

The results are pickled, as Ray itself sends them from the actor; only this project's own results
directory is read back, and only lines whose checksum holds are unpickled.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.grid.shard_tasks import ExampleResult

log = logging.getLogger(__name__)

SPOOL_DIR = "spool"
FORMAT = 1  # bump when a line's layout changes: older lines are then skipped, never misread


def spool_dir(results_dir: str | os.PathLike[str]) -> Path:
    """Where a results directory keeps its units' spools."""
    return Path(results_dir) / SPOOL_DIR


def spool_path(results_dir: str | os.PathLike[str], unit_key: str) -> Path:
    """The spool file of the unit whose first shard id is ``unit_key`` (``jobs.run.scheduler.WorkUnit.key``)."""
    return spool_dir(results_dir) / f"{unit_key}.jsonl"


def finished_examples(path: Path) -> int:
    """How many examples a unit's spool holds (complete lines; 0 for none or an unreadable file): the
    scheduler's measure of an attempt's progress (``jobs.run.scheduler``, ``progress``)."""
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


@dataclass(frozen=True)
class SpoolKey:
    """What a spooled line must match to be reused: the unit's shard ids (in order), the device label
    the rows will carry, and the code version that decoded it."""

    shard_ids: tuple[str, ...]
    device: str
    code_version: str


@dataclass(frozen=True)
class UnitSpool:
    """The spool file of one unit, read and appended by the actor that runs the unit."""

    path: Path
    key: SpoolKey

    def load(self) -> dict[str, tuple[ExampleResult, ...]]:
        """Example id → its results (one per shard, marked ``resumed``) for every reusable line; the
        lines skipped are named in one warning. A missing file is an empty spool."""
        try:
            lines = self.path.read_bytes().split(b"\n")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("spool %s: cannot read it (%s); its unit is decoded from the start", self.path, exc)
            return {}
        done: dict[str, tuple[ExampleResult, ...]] = {}
        skipped: list[str] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            entry = self._entry(line)
            if isinstance(entry, str):
                skipped.append(f"line {number}: {entry}")
            elif entry[0] not in done:
                done[entry[0]] = entry[1]
        if skipped:
            log.warning("spool %s: skipped %d of %d lines, their examples are decoded again (%s)", self.path,
                        len(skipped), len(skipped) + len(done), "; ".join(skipped))
        return done

    def _entry(self, line: bytes) -> tuple[str, tuple[ExampleResult, ...]] | str:
        """(example id, results) of one line, or why it cannot be reused."""
        try:
            doc = json.loads(line)
            fields = (doc["format"], doc["shard_ids"], doc["example_id"], doc["device"], doc["code_version"],
                      doc["sha256"], doc["results"])
        except (ValueError, TypeError, KeyError):
            return "damaged (not a whole spool line: truncated or corrupt)"
        fmt, shard_ids, example_id, device, version, digest, payload = fields
        if fmt != FORMAT:
            return f"spool format {fmt!r}, this code reads {FORMAT}"
        if tuple(shard_ids) != self.key.shard_ids:
            return f"written for shards {shard_ids}, not this unit's {list(self.key.shard_ids)} (stale or foreign)"
        if (device, version) != (self.key.device, self.key.code_version):
            return (f"decoded on {device} by code {version}; this actor is {self.key.device} running "
                    f"{self.key.code_version}")
        results = _unpickled(payload, digest)
        if results is None or not _fits(results, example_id, len(self.key.shard_ids)):
            return "damaged (checksum or contents do not match)"
        return example_id, tuple(dataclasses.replace(r, resumed=True) for r in results)

    def append(self, example_id: str, results: Sequence[ExampleResult]) -> None:
        """Persist one finished example's results (one per shard) durably: one line, flushed and fsynced
        (a new file's directory entry too). Raises OSError (the actor carries on without the spool)."""
        payload = pickle.dumps(tuple(results), protocol=pickle.HIGHEST_PROTOCOL)
        line = json.dumps({"format": FORMAT, "shard_ids": list(self.key.shard_ids), "example_id": example_id,
                           "device": self.key.device, "code_version": self.key.code_version,
                           "sha256": hashlib.sha256(payload).hexdigest(),
                           "results": base64.b64encode(payload).decode("ascii")}).encode() + b"\n"
        new = not self.path.exists()
        with open(self.path, "a+b") as fh:
            if fh.seek(0, os.SEEK_END) > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":  # a killed writer's half line: end it, so this line stays whole
                    line = b"\n" + line
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        if new:
            _fsync_dir(self.path.parent)


def open_unit_spool(directory: str | os.PathLike[str] | None, key: SpoolKey) -> UnitSpool | None:
    """The unit's spool under ``directory`` (the driver's :func:`prepare`), or None when there is none
    or it is not visible from this node (``results_dir`` not on a shared file system): the unit then
    runs as if unspooled, with a warning saying why."""
    if directory is None:
        return None
    folder = Path(directory)
    if not folder.is_dir():
        log.warning("spool directory %s is not visible from this node: this unit's finished examples are not "
                    "kept if it is killed (put results_dir on a file system every node shares)", folder)
        return None
    return UnitSpool(folder / f"{key.shard_ids[0]}.jsonl", key)


def prepare(results_dir: str | os.PathLike[str], finished_keys: Iterable[str]) -> Path:
    """Create the spool directory, and remove the spools of units whose shards are all written (a run
    killed between writing a unit's shards and removing its spool). Raises OSError."""
    folder = spool_dir(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for key in finished_keys:
        spool_path(results_dir, key).unlink(missing_ok=True)
    return folder


def remove(results_dir: str | os.PathLike[str], unit_key: str) -> None:
    """Remove a unit's spool once its shard files are written; a failure is logged (the file is then
    removed by the next run's :func:`prepare`)."""
    try:
        spool_path(results_dir, unit_key).unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not remove the spool of unit %s: %s", unit_key, exc)


def _unpickled(payload: Any, digest: Any) -> tuple[Any, ...] | None:
    """The pickled results of a line whose checksum holds; None otherwise."""
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, TypeError, ValueError):
        return None
    if hashlib.sha256(raw).hexdigest() != digest:
        return None
    try:
        results = pickle.loads(raw)
    except (pickle.UnpicklingError, AttributeError, ImportError, EOFError, TypeError, ValueError, IndexError):
        return None
    return results if isinstance(results, tuple) else None


def _fits(results: tuple[Any, ...], example_id: str, shards: int) -> bool:
    """One ExampleResult per shard of the unit, each for ``example_id``."""
    return len(results) == shards and all(isinstance(r, ExampleResult) and r.example_id == example_id
                                          for r in results)


def _fsync_dir(folder: Path) -> None:
    """Make a new file's directory entry durable (skipped where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on a directory; the line itself is fsynced
            os.fsync(fd)
    finally:
        os.close(fd)
