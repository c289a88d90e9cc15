"""Run a whole grid: plan and validate, skip finished shards, start Ray, then one loop over the
scheduler's events: a decoded unit goes to a CPU worker for scoring and rows, its rows to the writer
(each shard atomically), a failed unit to the error count; finally record the run.

``run_grid(grid)`` works the same on this machine (it starts a loopback Ray) and inside a Slurm job
(``grid.ray.address`` names the running cluster). It is idempotent: rerunning the same grid only
computes the shards whose files are missing or damaged, so a preempted or killed run is resumed by
running it again.

One example's path: this loop → :mod:`jobs.run.scheduler` → a model actor (:mod:`jobs.run.actors`) decodes it;
back here, :mod:`jobs.run.rows` scores it and builds its rows; here again, :mod:`jobs.run.writer` writes
them. The scheduler never calls back into this module: it yields events (docs/grid.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.grid.allocation_fit import Shape
from jobs.grid.plan import GridPlan, plan_grid
from jobs.grid.shard_tasks import DecodedShard, Placement, ShardTask
from jobs.grid.shards import Shard
from jobs.grid.unit_sizing import unit_timeouts
from jobs.grid.units import group_shards
from jobs.run import spool, stop_signals
from jobs.run.actors import spawn_actor_for, submit_unit
from jobs.run.local_ray import RayStartError, start_ray, stop_ray
from jobs.run.progress import GridProgress
from jobs.run.rows import ShardRows, failed_shard_rows, remote_score_unit
from jobs.run.scheduler import Decoded, Finished, Scheduler, WorkUnit
from jobs.run.writer import ResultWriter
from streamgen.config import ClusterConfig, GridConfig, cluster_config
from streamgen.results import compaction, results_dir
from streamgen.results.compaction import AUTO_COMPACT_SHARDS, compact, loose_shards
from streamgen.results.records import SCHEMA_VERSION, RunRecord
from streamgen.results.version import code_version

__all__ = ["GridAborted", "GridSummary", "SandboxUnavailable", "Timings", "run_grid"]

log = logging.getLogger(__name__)


def run_grid(grid: GridConfig, *, cluster: ClusterConfig | None = None, shape: Shape | None = None,
             progress: bool | None = None, on_dispatch: Callable[[Any, WorkUnit], None] | None = None) -> GridSummary:
    """Run (or resume) ``grid`` on ``cluster`` (default: ``grid.cluster``'s file); returns what was done.

    Raises ConfigError before any actor starts when the grid is invalid or, given ``shape`` (the
    cluster's Ray, ``jobs.cluster.executors.allocation``: the workflows' path), the allocation does not fit
    it (``jobs.grid.allocation_fit``); ResultsDirError when the results directory cannot be written or another
    run holds it, GridAborted past ``max_error_fraction``, SandboxUnavailable (a GridAborted) when the
    sandbox cannot run answers after its retries, and RunInterrupted on SIGTERM/SIGINT."""
    start = time.perf_counter()
    cluster = cluster or cluster_config(grid.cluster)
    plan = plan_grid(grid, cluster, shape)
    with results_dir.hold(grid.results_dir, new_run_id()) as lock, stop_signals.catching() as stops:
        return _run_locked(plan, lock, stops, start, progress, on_dispatch, cluster.rehearsal)


def _run_locked(plan: GridPlan, lock: results_dir.ResultsLock, stops: stop_signals.StopSignals, start: float,
                progress: bool | None, on_dispatch: Callable[[Any, WorkUnit], None] | None,
                rehearsal: bool = False) -> GridSummary:
    grid = plan.grid
    writer = ResultWriter(grid.results_dir)
    with results_dir.named_io_errors(grid.results_dir, "checking the finished shards in"):
        if removed := writer.remove_stale_temp_files(lock):
            log.info("removed %d temporary files left by an interrupted run", removed)
        compact(lock, drop_damaged=True, min_shards=AUTO_COMPACT_SHARDS)  # a killed run's shards: resume then reads one manifest, not 10^4 files
        todo = [s for s in plan.shards if not writer.is_done(s)]
        loose = len(loose_shards(lock.root, writer.manifest))  # fewer than AUTO_COMPACT_SHARDS
        spool_folder = prepare_spool(grid.results_dir, {s.shard_id for s in plan.shards} - {s.shard_id for s in todo})
    summary = GridSummary(lock.holder.run_id, Path(grid.results_dir), len(plan.shards), len(plan.shards) - len(todo))
    summary.timings.plan_s = time.perf_counter() - start
    log.info("run %s: %d shards, %d already done, %d to run", summary.run_id, len(plan.shards),
             summary.shards_skipped, len(todo))
    writer.write_config(summary.run_id, plan.resolved_yaml)
    bar = GridProgress(shards_total=len(plan.shards), examples_total=sum(len(s) for s in todo),
                       shards_skipped=summary.shards_skipped, enabled=progress)
    session = None
    run: GridRun | None = None
    status, stop = "failed", None
    try:
        t0 = time.perf_counter()
        try:
            session = start_ray(grid.ray, default_num_cpus=grid.workers + grid.score_workers)
        except RayStartError as exc:
            raise GridAborted(str(exc)) from None
        stops.install()  # ray.init put its own SIGTERM handlers in place of ours
        summary.timings.ray_start_s = time.perf_counter() - t0
        run = GridRun(plan, todo, summary, bar, use_gpu=_cluster_gpus() >= 1, stops=stops, spool_dir=spool_folder,
                      rehearsal=rehearsal, lock=lock, loose=loose)
        writer.write_run(run.run_record("running"))
        if todo:
            _schedule(run, grid, on_dispatch)
        status = "finished"
    except stop_signals.RunInterrupted as exc:
        status, stop = "interrupted", exc.name
        raise
    except SystemError as exc:  # a stop signal raised inside a C extension's call outside the shield
        if (inner := stop_signals.wrapped_in(exc)) is None:
            raise
        status, stop = "interrupted", inner.name
        raise inner from None
    except GridAborted:
        status = "aborted"
        raise
    finally:
        with stops.closing():  # a SIGTERM now must not cut the run record short
            bar.close()
            status, stop = stop_signals.run_end(status, stop)  # a requeue names the end (SIGUSR2)
            if run is not None:
                _close_record(writer, run, status, stop)
            if session is not None:
                stop_ray(session)
            summary.wall_s = time.perf_counter() - start
    _compact_finished(lock)
    return summary


def _compact_finished(lock: results_dir.ResultsLock) -> None:
    """Merge the run's per-shard files, so every reader after it reads a few files (docs/grid.md)."""
    t0 = time.perf_counter()
    with results_dir.named_io_errors(lock.root, "compacting the result files in"):
        done = compact(lock, min_shards=AUTO_COMPACT_SHARDS)
    if done.shards:
        log.info("compacted %d shards in %.1f s", done.shards, time.perf_counter() - t0)


def prepare_spool(root: str, finished: set[str]) -> Path | None:
    """The spool directory the actors keep finished examples in (``jobs.run.spool``), ready; the spools of
    units already written are removed. (``bench/bench_requeue.py`` swaps this for one returning None to
    measure a requeue without it.)"""
    with results_dir.named_io_errors(spool.spool_dir(root)):
        return spool.prepare(root, finished)


def _close_record(writer: ResultWriter, run: GridRun, status: str, stop: str | None) -> None:
    """The run record's last state; a failure to write it (disk full) is logged, not raised over the
    error that ended the run (a finished run raises it)."""
    try:
        writer.write_run(run.run_record(status, stop))
    except results_dir.ResultsDirError as exc:
        if status == "finished":
            raise
        log.error("could not record the end of run %s: %s", run.summary.run_id, exc)
    log.info("run %s %s%s", run.summary.run_id, status, f" by {stop}" if stop else "")


def _cluster_gpus() -> float:
    import ray

    return float(ray.cluster_resources().get("GPU", 0.0))


def _schedule(run: GridRun, grid: GridConfig, on_dispatch: Callable[[Any, WorkUnit], None] | None) -> None:
    """The driver's loop: every unit's events, in the order they happen."""
    workers = grid.workers
    if run.use_gpu and workers > _cluster_gpus():
        workers = int(_cluster_gpus())
        log.warning("workers=%d but the cluster has %d GPUs: using %d model actors", grid.workers, workers, workers)
    units = run.units()
    # a unit holds up to one shard per acceptance cell (jobs/grid/units.py): its allowance scales with it
    timeout_s = grid.shard_timeout_s * max(len(u.payload) for u in units)
    scheduler = Scheduler(spawn=functools.partial(spawn_actor_for, run.plan.models, use_gpu=run.use_gpu,
                                                   verbose=run.plan.grid.verbose, warm_up=run.plan.grid.warm_up,
                                                   cpu_fallback=run.rehearsal),
                          submit=functools.partial(submit_unit, spool_dir=str(run.spool_dir) if run.spool_dir else None),
                          workers=workers, unit_timeout_s=timeout_s, on_dispatch=on_dispatch,
                          progress=run.spooled_examples if run.spool_dir else None, shield=run.stops.deferred)
    with contextlib.closing(scheduler.run(units)) as events:  # leaving early (GridAborted) kills the actors
        for event in events:
            if isinstance(event, Decoded):  # decoded on an actor: score it and build its rows on a CPU worker
                run.account(event.value)
                scheduler.follow(event.unit, remote_score_unit(event.unit.payload, event.value))
            elif isinstance(event, Finished):  # its rows: write each shard
                run.finish(event.unit, event.value)
            else:  # used up its attempts
                run.on_failed(event.unit, event.error)
    log.info("scheduler: %s", scheduler.stats)


class GridAborted(RuntimeError):
    """More examples failed than ``max_error_fraction`` allows; finished shards stay on disk."""


class SandboxUnavailable(GridAborted):
    """The sandbox could not run answers even after its retries: every verdict would be a quiet
    ``error``. The shard is not written (a rerun recomputes it); finished shards stay on disk."""


@dataclass
class Timings:
    """Where the wall time went (seconds; actor-side figures are summed over actors)."""

    plan_s: float = 0.0
    ray_start_s: float = 0.0
    load_s: float = 0.0  # model loads inside actors
    decode_s: float = 0.0  # run_unit wall on actors, model load excluded
    forward_s: float = 0.0  # of which inside model forwards
    decode_cpu_s: float = 0.0  # CPU time of the actors while decoding (what a quiet machine needs)
    score_s: float = 0.0  # scoring tasks
    write_s: float = 0.0  # result files, in the driver


@dataclass
class GridSummary:
    run_id: str
    results_dir: Path
    shards_total: int
    shards_skipped: int  # complete on disk before this run
    shards_done: int = 0  # computed by this run
    shards_failed: list[str] = field(default_factory=list)
    examples: int = 0
    errors: int = 0
    excluded: int = 0
    wall_s: float = 0.0
    timings: Timings = field(default_factory=Timings)
    devices: dict[str, str] = field(default_factory=dict)  # actor id → device
    placements: dict[str, Placement] = field(default_factory=dict)  # actor id → its GPU ids, CPU fallback
    numerics: dict[str, str] = field(default_factory=dict)  # actor id → its NumericsRecord JSON
    forwards_executed: int = 0  # model calls the actors executed (shared base runs / first steps once)
    examples_resumed: int = 0  # pair rows whose decoding came from a unit's spool (jobs.run.spool), not this run

    @property
    def forward_share(self) -> float:
        """Share of actor decode time spent inside model forwards."""
        return self.timings.forward_s / self.timings.decode_s if self.timings.decode_s else float("nan")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    return f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


class GridRun:
    """The state of one run_grid call: counters, the writer, the progress bar, the run record; the
    driver's loop hands it each unit's events."""

    def __init__(self, plan: GridPlan, todo: list[Shard], summary: GridSummary, progress: GridProgress,
                 use_gpu: bool, stops: stop_signals.StopSignals | None = None, spool_dir: Path | None = None,
                 rehearsal: bool = False, lock: results_dir.ResultsLock | None = None, loose: int = 0) -> None:
        self.plan, self.todo, self.summary, self.progress = plan, todo, summary, progress
        self.spool_dir = spool_dir  # where actors keep each unit's finished examples (None: not kept)
        self.rehearsal = rehearsal  # actors on GPUs without CUDA run on CPU (jobs.run.actors.pick_device)
        self.stops = stops or stop_signals.StopSignals()
        self.writer, self.use_gpu = ResultWriter(summary.results_dir), use_gpu
        self.max_errors = plan.grid.max_error_fraction * sum(len(s) for s in todo)
        self.started_at = _now()
        self._nodes: list[dict[str, Any]] | None = None
        self.lock = lock  # held: the run compacts as it goes (None: it does not, e.g. a bench's own loop)
        self.loose = loose  # shards in per-shard files, not yet in the manifest

    def units(self) -> list[WorkUnit]:
        """The shards to run as work units (``jobs.grid.units``); a unit's payload is its shards' tasks,
        each built here once."""
        out = []
        timeouts = unit_timeouts(self.plan) if self.plan.grid.shard_size == "auto" else {}
        for shards in group_shards(self.todo, share=self.plan.grid.share_work):
            tasks = tuple(self.plan.task(s, self.summary.run_id, code_version()) for s in shards)
            out.append(WorkUnit(shards[0].shard_id, shards[0].model_name, tasks, timeout_s=timeouts.get(shards[0].shard_id)))
        return out

    def account(self, decoded: tuple[DecodedShard, ...]) -> None:
        """Add a decoded unit's actor-side times and model calls to the summary."""
        t = self.summary.timings
        for d in decoded:
            t.load_s += d.load_s
            t.decode_s += d.busy_s
            t.forward_s += d.forward_wall_s
            t.decode_cpu_s += d.cpu_s
            self.summary.devices[d.actor_id] = d.device
            self.summary.placements[d.actor_id] = d.placement
            if d.numerics is not None:
                self.summary.numerics[d.actor_id] = d.numerics
            self.summary.forwards_executed += d.forwards_executed
            self.summary.examples_resumed += d.resumed
        if resumed := sum(d.resumed for d in decoded):
            log.info("unit %s: resumed %d examples from spool, decoded %d", decoded[0].shard_id, resumed,
                     sum(len(d.results) for d in decoded) - resumed)

    def spooled_examples(self, unit: WorkUnit) -> int:
        """The examples ``unit``'s spool holds: the scheduler's measure of an attempt's progress."""
        return spool.finished_examples(spool.spool_path(self.summary.results_dir, unit.key))

    def finish(self, unit: WorkUnit, unit_rows: tuple[ShardRows, ...]) -> None:
        """Write each shard of the unit; then its spool is no longer needed."""
        for task, rows in zip(unit.payload, unit_rows, strict=True):
            self._finish_shard(task, rows)
        if self.spool_dir is not None:
            spool.remove(self.summary.results_dir, unit.key)
        self.loose += len(unit.payload)
        if self.lock is not None and self.loose >= compaction.COMPACT_EVERY_SHARDS:
            self._compact(self.lock)

    def _compact(self, lock: results_dir.ResultsLock) -> None:
        """Merge the loose shards now (a stop signal during it leaves a state the next run's start cleans up:
        ``streamgen.results.compaction``), so a run stopped later leaves few per-shard files."""
        t0 = time.perf_counter()
        with results_dir.named_io_errors(lock.root, "compacting the result files in"):
            done = compact(lock)
        self.writer.reload()
        self.loose = 0
        log.info("compacted %d shards during the run in %.1f s", done.shards, time.perf_counter() - t0)

    def _finish_shard(self, task: ShardTask, rows: ShardRows) -> None:
        if rows.sandbox_errors:
            shard: Shard = task.shard
            raise SandboxUnavailable(
                f"the sandbox could not run {len(rows.sandbox_errors)} answers of shard {shard.shard_id} "
                f"({shard.cell.label}) after its retries; first: {rows.sandbox_errors[0].strip()}\n"
                f"The shard was not written. Check the scorer here with `python -m streamgen.benchmarks "
                f"check {shard.cell.benchmark.name} --limit 5` (is bubblewrap installed, does the "
                f"benchmark's options.python run?), then rerun to resume.")
        start = time.perf_counter()
        # a stop signal now waits until this shard has landed whole and is counted in the run record
        with self.stops.deferred():
            self.writer.write_shard(task.shard, rows.pairs, rows.steps)
            self.summary.shards_done += 1
            self.summary.timings.write_s += time.perf_counter() - start
            self.summary.timings.score_s += rows.score_s
            self._count(len(task), rows.errors, rows.excluded)

    def on_failed(self, unit: WorkUnit, error: str) -> None:
        """A unit that used up its attempts: its shards are not written (a rerun retries them), their
        examples count as errors."""
        for task in unit.payload:
            self.summary.shards_failed.append(task.shard.shard_id)
            log.error("shard %s (%s) failed:\n%s", task.shard.shard_id, task.cell.label, error)
            rows = failed_shard_rows(task, error)
            self._count(len(task), rows.errors, 0)

    def _count(self, examples: int, errors: int, excluded: int) -> None:
        s = self.summary
        s.examples, s.errors, s.excluded = s.examples + examples, s.errors + errors, s.excluded + excluded
        self.progress.shard_done(examples, errors)
        if s.errors > self.max_errors:
            raise GridAborted(
                f"{s.errors} examples failed, more than max_error_fraction={self.plan.grid.max_error_fraction} "
                f"of the {sum(len(x) for x in self.todo)} to run; see error_type/error_traceback in "
                f"{s.results_dir}/pairs (finished shards are kept; rerun to resume)")

    def run_record(self, status: str, stop_signal: str | None = None) -> RunRecord:
        """The run record in state ``status`` (``running`` until the run ends)."""
        s = self.summary
        return RunRecord(s.run_id, self.plan.grid.name, self.plan.resolved_yaml, code_version(),
                         socket.gethostname(), json.dumps(self._inventory(), sort_keys=True),
                         self.started_at, None if status == "running" else _now(), s.shards_total,
                         s.shards_skipped + s.shards_done, s.shards_skipped, SCHEMA_VERSION, s.forwards_executed,
                         examples_resumed=s.examples_resumed, status=status, stop_signal=stop_signal, numerics=_numerics_json(s.numerics),
                         model_snapshots=json.dumps(dict(self.plan.snapshots), sort_keys=True))


    def _inventory(self) -> dict[str, Any]:
        """Ray's nodes are asked once, at the start: after a signal to the process group Ray's own
        processes are gone and asking again would hang."""
        if self._nodes is None:
            self._nodes = ray_nodes()
        placements = {a: dataclasses.asdict(p) for a, p in self.summary.placements.items()}
        return {"nodes": self._nodes, "actors": self.summary.devices, "actor_placements": placements,
                "driver_cpus": os.cpu_count()}


def _numerics_json(by_actor: dict[str, str]) -> str | None:
    """``runs.numerics``: actor id → that actor's numerics record (None before any shard was decoded)."""
    return json.dumps({a: json.loads(n) for a, n in by_actor.items()}, sort_keys=True) if by_actor else None


def ray_nodes() -> list[dict[str, Any]]:
    """Ray's live nodes with their resources."""
    import ray

    nodes = []
    if ray.is_initialized():
        for n in ray.nodes():
            if n.get("Alive"):
                nodes.append({"host": n.get("NodeManagerHostname"), "address": n.get("NodeManagerAddress"),
                              "resources": {k: v for k, v in n.get("Resources", {}).items()
                                            if not k.startswith("node:")}})
    return nodes


