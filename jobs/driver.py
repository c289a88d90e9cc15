"""Run a whole grid: plan and validate, skip finished shards, start Ray, hand the shards to the
scheduler with one :class:`jobs.grid_run.GridRun` (decode on model actors, score on CPU workers, write
each shard atomically), record the run.

``run_grid(grid)`` works the same on this machine (it starts a loopback Ray) and inside a Slurm job
(``grid.ray.address`` names the running cluster). It is idempotent: rerunning the same grid only
computes the shards whose files are missing or damaged, so a preempted or killed run is resumed by
running it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs.grid_run import GridAborted, GridRun, GridSummary, SandboxUnavailable, Timings, new_run_id
from jobs.plan import plan_grid
from jobs.progress import GridProgress
from jobs.ray_env import start_ray, stop_ray
from jobs.scheduler import Scheduler, WorkUnit
from jobs.writer import ResultWriter
from streamgen.config import GridConfig

__all__ = ["GridAborted", "GridSummary", "SandboxUnavailable", "Timings", "run_grid"]

log = logging.getLogger(__name__)


def run_grid(grid: GridConfig, *, progress: bool | None = None,
             on_dispatch: Callable[[Any, WorkUnit], None] | None = None) -> GridSummary:
    """Run (or resume) ``grid``; returns what was done. Raises ConfigError before any actor starts
    when the grid is invalid, GridAborted past ``max_error_fraction``, and SandboxUnavailable
    (a GridAborted) when the sandbox cannot run answers after its retries."""
    start = time.perf_counter()
    plan = plan_grid(grid)
    writer = ResultWriter(grid.results_dir)
    if removed := writer.remove_stale_temp_files():
        log.info("removed %d temporary files left by an interrupted run", removed)
    todo = [s for s in plan.shards if not writer.is_done(s)]
    summary = GridSummary(new_run_id(), Path(grid.results_dir), len(plan.shards), len(plan.shards) - len(todo))
    summary.timings.plan_s = time.perf_counter() - start
    log.info("run %s: %d shards, %d already done, %d to run", summary.run_id, len(plan.shards),
             summary.shards_skipped, len(todo))
    writer.write_config(summary.run_id, plan.resolved_yaml)
    bar = GridProgress(shards_total=len(plan.shards), examples_total=sum(len(s) for s in todo),
                       shards_skipped=summary.shards_skipped, enabled=progress)
    session = None
    run: GridRun | None = None
    try:
        t0 = time.perf_counter()
        session = start_ray(grid.ray, default_num_cpus=grid.workers + grid.score_workers)
        summary.timings.ray_start_s = time.perf_counter() - t0
        run = GridRun(plan, todo, summary, bar, use_gpu=_cluster_gpus() >= 1)
        writer.write_run(run.run_record(finished=False))
        if todo:
            _schedule(run, grid, on_dispatch)
    finally:
        bar.close()
        if run is not None:
            writer.write_run(run.run_record(finished=True))
        if session is not None:
            stop_ray(session)
        summary.wall_s = time.perf_counter() - start
    return summary


def _cluster_gpus() -> float:
    import ray

    return float(ray.cluster_resources().get("GPU", 0.0))


def _schedule(run: GridRun, grid: GridConfig, on_dispatch: Callable[[Any, WorkUnit], None] | None) -> None:
    workers = grid.workers
    if run.use_gpu and workers > _cluster_gpus():
        workers = int(_cluster_gpus())
        log.warning("workers=%d but the cluster has %d GPUs: using %d model actors", grid.workers, workers, workers)
    units = run.units()
    # a unit holds up to one shard per acceptance cell (jobs/shared_work.py): its allowance scales with it
    timeout_s = grid.shard_timeout_s * max(len(u.payload) for u in units)
    scheduler = Scheduler(spawn=run.spawn, submit=run.submit, after=run.after, finish=run.finish,
                          on_failed=run.on_failed, workers=workers, unit_timeout_s=timeout_s,
                          on_dispatch=on_dispatch)
    stats = scheduler.run(units)
    log.info("scheduler: %s", stats)
