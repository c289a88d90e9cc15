"""The grid's driver as one requeueable submitit job, and the grid's run under its cluster's executor.

``run(grid)`` is what the workflows call: in this process for ``executor: local``, else one job through
:mod:`jobs.executors` (``debug``: submitit's in-process DebugExecutor; ``slurm``: ``sbatch``), after
every check (the grid, the cluster config, what the cluster really has) has passed. Inside the job,
:class:`RayJob` starts a Ray cluster over the allocation (head on rank 0, workers on the other ranks;
CPU/GPU counts from Slurm's variables, see :mod:`jobs.ray_bootstrap`) and runs the same
``jobs.driver.run_grid`` as a local run.

Preemption and time limits: ``RayJob`` is ``submitit.helpers.Checkpointable``; on SIGUSR2 submitit calls
:meth:`RayJob.checkpoint`, which resubmits the job unchanged and requeues it. The resumed run skips
every shard whose result file exists and validates, so nothing is lost or duplicated. A signal that
reaches one node's task alone is relayed to rank 0 (:mod:`jobs.preemption`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from jobs import executors, preemption, ray_bootstrap
from streamgen.config import (
    ClusterConfig,
    GridConfig,
    RayConfig,
    cluster_config,
    resolve_data_dir,
    validate_grid,
)

log = logging.getLogger(__name__)


class RayJob(submitit.helpers.Checkpointable):
    """A checkpointable job: start Ray over the allocation, run ``task(ray_address)`` on rank 0.

    Picklable (submitit stores it for the job and again at each checkpoint). ``task`` must be
    idempotent across requeues; ``GridTask`` is, because finished shards are skipped.
    """

    def __init__(self, task: Callable[[str], Any], ray: RayConfig, default_cpus: int, log_dir: Path) -> None:
        self.task = task
        self.ray = ray
        self.default_cpus = default_cpus
        self.log_dir = log_dir  # absolute; the job's files go to log_dir/<job id>/
        self.attempt = 0  # incremented at each checkpoint: the log shows which run this is

    def __call__(self) -> Any:
        if not logging.getLogger().handlers:  # the job is an entry point: its log goes to stderr
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
            logging.getLogger("submitit").propagate = False  # it has its own handler
        folder = self.log_dir / str(submitit.JobEnvironment().job_id)  # = submitit's folder (%j)
        alloc = ray_bootstrap.allocation_from_env(folder, self.ray, self.default_cpus)
        log.info("job %s rank %d/%d attempt %d: %d CPUs, %d GPUs", alloc.job_id, alloc.rank,
                 alloc.num_nodes, self.attempt, alloc.num_cpus, alloc.num_gpus)
        with preemption.relay(alloc.is_head, ray_bootstrap.run_file(alloc, "preempt")), \
                ray_bootstrap.ray_cluster(alloc, self.ray) as address:
            return self.task(address) if alloc.is_head else None

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Preempted or timed out: requeue this same job; the rerun resumes from the finished shards."""
        self.attempt += 1
        log.warning("checkpoint: requeueing (attempt %d will skip every finished shard)", self.attempt)
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


@dataclasses.dataclass(frozen=True)
class GridTask:
    """The driver of one grid, run against the Ray cluster the job started."""

    grid: GridConfig

    def __call__(self, address: str) -> Any:
        from jobs.driver import run_grid  # lazy: the job sets Ray's env before anything imports ray

        ray_cfg = dataclasses.replace(self.grid.ray, address=address)
        return run_grid(dataclasses.replace(self.grid, ray=ray_cfg))


def absolute_paths(grid: GridConfig) -> GridConfig:
    """Results and data directories as absolute paths: the job may start in another directory."""
    return dataclasses.replace(grid, results_dir=str(Path(grid.results_dir).resolve()),
                               data_dir=str(resolve_data_dir(grid.data_dir).resolve()))


def submit(grid: GridConfig, cluster: ClusterConfig | None = None,
           task: Callable[[str], Any] | None = None) -> submitit.Job:
    """Validate everything, then submit one job running ``task`` (default: the grid's driver).

    Raises :class:`streamgen.config.ConfigError` listing every problem before anything is queued.
    """
    cluster = cluster or cluster_config(grid.cluster)
    problems = validate_grid(grid) if task is None else []
    grid = absolute_paths(grid)
    job = RayJob(task or GridTask(grid), grid.ray, cluster.cpus_per_task, Path(cluster.log_dir).resolve())
    return executors.submit(cluster, grid.name, job, problems)


def run(grid: GridConfig, cluster: ClusterConfig | None = None) -> Any:
    """Run ``grid`` where its cluster config says (default ``grid.cluster``); returns its GridSummary."""
    from jobs.driver import run_grid  # imports ray: here, so importing this module (to submit) stays light

    cluster = cluster or cluster_config(grid.cluster)
    # the dispatch calls the driver itself (no closure here: one example's path enters this module once)
    return executors.run(cluster, here=functools.partial(run_grid, grid), job=functools.partial(submit, grid, cluster))
