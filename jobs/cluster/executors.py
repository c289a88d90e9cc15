"""Run work where the cluster config says: the one dispatch every workflow uses, and the grid's job.

``configs/cluster/<name>.yaml``, field ``executor``, names the cluster kind (:mod:`jobs.cluster.kinds`); what
differs between kinds is asked of the kind (:class:`~jobs.cluster.kind_protocol.ClusterKind`), never of the string:

- ``local``: the work runs in this process (no submitit, no job folder): :func:`run` calls ``here()``.
- ``debug``: submitit's DebugExecutor runs the submitted job in this process (breakpoints work, the
  original exception is re-raised); the job takes the same path as on Slurm.
- ``slurm``: one ``sbatch`` job through submitit (parameters: :mod:`jobs.cluster.slurm`); :func:`follow`
  relays its log lines and returns rank 0's result.

:func:`submit` checks the cluster config and what the cluster can really give (Slurm's partition
inventory, or this machine's GPUs), :func:`submit_grid` also the grid, its checkpoints and the
allocation against the work (:mod:`jobs.grid.allocation_fit`); one ``ConfigError`` lists every problem before
anything is queued.

The grid (:func:`run_grid_on_cluster`, what the workflows call) runs as one :class:`RayJob`: inside
the job it starts a Ray cluster over the allocation (head on rank 0, workers on the other ranks;
CPU/GPU counts as the kind reads them, see :mod:`jobs.cluster.ray_cluster`) and runs the same
``jobs.run.driver.run_grid`` as a local run. Preemption and time limits: ``RayJob`` is
``submitit.helpers.Checkpointable``; on SIGUSR2 submitit calls :meth:`RayJob.checkpoint`, which
resubmits the job unchanged and requeues it. The resumed run skips every shard whose result file
exists and validates, so nothing is lost or duplicated. A signal that reaches one node's task alone
is relayed to rank 0 (:mod:`jobs.cluster.preemption_relay`). The adaptation's job is :mod:`jobs.cluster.adapt_job`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import submitit

from jobs.cluster import preemption_relay, ray_cluster
from jobs.cluster.kind_protocol import Offer
from jobs.cluster.kinds import KINDS, cluster_kind, unknown_kind_line
from jobs.grid import allocation_fit
from jobs.grid.checkpoint_preflight import grid_models, grid_problems
from jobs.run import stop_signals
from streamgen.config import (
    ClusterConfig,
    GridConfig,
    RayConfig,
    cluster_config,
    cluster_device_problems,
    raise_if_problems,
    resolve_data_dir,
    validate_grid,
)
from streamgen.results import results_dir

log = logging.getLogger(__name__)

POLL_S = 2.0
T = TypeVar("T")


def run(cluster: ClusterConfig, *, here: Callable[[], T], job: Callable[[], submitit.Job]) -> T:
    """``here()`` in this process when the cluster's kind runs here (``local``); else ``job()`` (which submits,
    normally through :func:`submit`) and wait for its result (debug: it runs now, in this process)."""
    if cluster_kind(cluster).runs_here:
        return here()
    result: T = follow(job())
    return result


def run_grid_on_cluster(grid: GridConfig, cluster: ClusterConfig | None = None) -> Any:
    """Run ``grid`` where its cluster config says (default ``grid.cluster``); returns its GridSummary."""
    from jobs.run.driver import (
        run_grid,  # imports ray: here, so importing this module (to submit) stays light
    )

    cluster = cluster or cluster_config(grid.cluster)
    kind = cluster_kind(cluster)

    def here() -> Any:
        ready = kind.prepare(grid, cluster)  # ray: attached, the cluster and results_dir checked
        return run_grid(ready, cluster=cluster, shape=allocation(ready, cluster))

    return run(cluster, here=here, job=functools.partial(submit_grid, grid, cluster))


# --------------------------------------------------------------------------------------------
# The grid's job: Ray over the allocation, requeued on preemption
# --------------------------------------------------------------------------------------------


class RayJob(submitit.helpers.Checkpointable):
    """A checkpointable job: start Ray over the allocation, run ``task(ray_address)`` on rank 0.

    Picklable (submitit stores it for the job and again at each checkpoint). ``task`` must be
    idempotent across requeues; ``GridTask`` is, because finished shards are skipped.
    """

    def __init__(self, task: Callable[[str], Any], ray: RayConfig, default_cpus: int, log_dir: Path,
                 max_requeues: int = 0, executor: str = "slurm") -> None:
        self.task = task
        self.executor = executor  # the cluster kind's name: it says what this task was given
        self.ray = ray
        self.default_cpus = default_cpus
        self.log_dir = log_dir  # absolute; the job's files go to log_dir/<job id>/
        self.attempt = 0  # incremented at each checkpoint: the log shows which run this is
        self.max_requeues = max_requeues  # the cluster's: a time-out that made progress is refunded up to it
        self._progress_at_start: Any = None

    def __call__(self) -> Any:
        if not logging.getLogger().handlers:  # the job is an entry point: its log goes to stderr
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
            logging.getLogger("submitit").propagate = False  # it has its own handler
        folder = self.log_dir / str(submitit.JobEnvironment().job_id)  # = submitit's folder (%j)
        self._progress_at_start = work_done(self.task)
        task_env = KINDS[self.executor].task_env(self.default_cpus)
        alloc = ray_cluster.allocation_from_env(folder, self.ray, task_env)
        log.info("job %s rank %d/%d attempt %d: %d CPUs, %d GPUs", alloc.job_id, alloc.rank,
                 alloc.num_nodes, self.attempt, alloc.num_cpus, alloc.num_gpus)
        with preemption_relay.relay(alloc.is_head, ray_cluster.run_file(alloc, "preempt")), \
                ray_cluster.ray_cluster(alloc, self.ray) as address:
            if not alloc.is_head:
                return None
            assert address is not None, "ray_cluster yields the head's address on rank 0"
            return self.task(address)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Preempted or timed out: requeue this same job; the rerun resumes from the finished shards."""
        self.attempt += 1
        stop_signals.note_requeue("SIGUSR2")  # the driver's run record: interrupted, not failed
        progressed = self._progress_at_start is not None and work_done(self.task) != self._progress_at_start
        log.warning("checkpoint: requeueing (attempt %d will skip every finished shard; %s)", self.attempt,
                    "work was finished, so a time-out here does not count against max_requeues" if progressed
                    else "no work finished in this attempt")
        requeue = DelayedSubmission(self, *args, **kwargs)
        requeue.refund, requeue.cap = int(progressed), self.max_requeues
        return requeue


class DelayedSubmission(submitit.helpers.DelayedSubmission):
    """The job resubmitted. submitit counts a time-out by lowering the countdown it then sets here; an
    attempt that finished work gets it back (``refund``, never above ``cap`` = ``max_requeues``), as a
    unit's attempts that finished examples do not count against its retries (docs/cluster.md).

    Named as submitit's own class on purpose: the requeued job reloads this pickle with
    ``submitit...DelayedSubmission.load``, which refuses any class of another *name* (a subclass named
    ``Requeue`` failed every requeue on the real Slurm cluster)."""

    refund: int = 0
    cap: int = 0

    def set_timeout(self, timeout_min: int, max_num_timeout: int) -> None:
        super().set_timeout(timeout_min, min(self.cap, max_num_timeout + self.refund) if self.refund else max_num_timeout)


def work_done(task: Any) -> Any:
    """What the task has finished so far (``task.progress()``), or None where it cannot say."""
    progress = getattr(task, "progress", None)
    return progress() if callable(progress) else None


@dataclasses.dataclass(frozen=True)
class GridTask:
    """The driver of one grid, run against the Ray cluster the job started; ``cluster`` is the config it
    was submitted with (command-line overrides included): the head node checks the work against it
    again, and its ``rehearsal`` reaches the actors."""

    grid: GridConfig
    cluster: ClusterConfig | None = None

    def progress(self) -> tuple[int, int]:
        """(files, bytes) under the results directory: finished shards and spooled examples both grow it."""
        files = [p for p in Path(self.grid.results_dir).rglob("*") if p.is_file()]
        return len(files), sum(p.stat().st_size for p in files)

    def __call__(self, address: str) -> Any:
        from jobs.run.driver import run_grid  # lazy: the job sets Ray's env before anything imports ray

        ray_cfg = dataclasses.replace(self.grid.ray, address=address)
        cluster = self.cluster or cluster_config(self.grid.cluster)
        return run_grid(dataclasses.replace(self.grid, ray=ray_cfg), cluster=cluster,
                        shape=allocation(self.grid, cluster))


def absolute_paths(grid: GridConfig) -> GridConfig:
    """Results and data directories as absolute paths: the job may start in another directory."""
    return dataclasses.replace(grid, results_dir=str(Path(grid.results_dir).resolve()),
                               data_dir=str(resolve_data_dir(grid.data_dir).resolve()))


def submit_grid(grid: GridConfig, cluster: ClusterConfig | None = None,
                task: Callable[[str], Any] | None = None) -> submitit.Job:
    """Validate everything, then submit one job running ``task`` (default: the grid's driver).

    Raises :class:`streamgen.config.ConfigError` listing every problem before anything is queued.
    """
    cluster = cluster or cluster_config(grid.cluster)
    problems = []
    if task is None:  # checkpoints (jobs/grid/checkpoint_preflight.py), then the allocation against the work (jobs/grid/allocation_fit.py)
        fit = allocation_fit.check(grid, cluster, grid_models(grid), allocation(grid, cluster))
        problems = [*validate_grid(grid), *grid_problems(grid), *fit.problems]
    if task is None and not problems:  # a results directory nobody can write fails here, not in the queue
        results_dir.check_writable(grid.results_dir, create=False)  # nothing written before the queue accepts
    grid = absolute_paths(grid)
    job = RayJob(task or GridTask(grid, cluster), grid.ray, cluster.cpus_per_task, Path(cluster.log_dir).resolve(),
                 cluster.max_requeues, cluster.executor)
    return submit(cluster, grid.name, job, problems)


# --------------------------------------------------------------------------------------------
# Checks before submitting
# --------------------------------------------------------------------------------------------


def validate_cluster(cluster: ClusterConfig) -> list[str]:
    """Problems with the cluster config itself (no cluster contacted)."""
    p: list[str] = []
    n = cluster.name
    kind = KINDS.get(cluster.executor)
    if kind is None:
        p.append(unknown_kind_line(cluster))
    if cluster.nodes < 1 or cluster.gpus_per_node < 0 or cluster.cpus_per_task < 1:
        p.append(f"cluster {n}: need nodes ≥ 1, gpus_per_node ≥ 0, cpus_per_task ≥ 1")
    if kind is not None:
        p.extend(kind.problems(cluster))
    if cluster.timeout_min < 1 or cluster.mem_gb < 1 or cluster.max_requeues < 0:
        p.append(f"cluster {n}: need timeout_min ≥ 1, mem_gb ≥ 1, max_requeues ≥ 0")
    return p + cluster_device_problems(cluster)


def allocation(grid: GridConfig, cluster: ClusterConfig) -> allocation_fit.Shape:
    """The Ray the grid will run on, as its cluster kind says (:mod:`jobs.grid.allocation_fit` checks the work
    against it): a local run's Ray started by ``jobs.run.driver`` on this machine, or a job's Ray over its
    nodes (``jobs.cluster.ray_cluster``); ``ray.num_cpus`` / ``ray.num_gpus`` win when set."""
    return cluster_kind(cluster).shape(grid, cluster)


def check_resources(cluster: ClusterConfig) -> Offer:
    """What the cluster can really give (Slurm's partition inventory, or this machine's GPUs), as its kind
    finds it: (problems, how to ask for the GPU type: ``constraint`` or ``gres``)."""
    return cluster_kind(cluster).offer(cluster)


# --------------------------------------------------------------------------------------------
# Submit and follow
# --------------------------------------------------------------------------------------------


def executor_parameters(cluster: ClusterConfig, job_name: str, gpu_type_as: str = "constraint") -> dict[str, Any]:
    """submitit parameters for ``cluster`` (generic, plus its kind's: :func:`jobs.cluster.slurm.slurm_parameters` on Slurm);
    pure, for tests and logs. ``gpu_type_as``: see :func:`jobs.cluster.slurm.slurm_parameters`."""
    params: dict[str, Any] = {
        "name": f"streamgen-{job_name}",
        "timeout_min": cluster.timeout_min,
        "nodes": cluster.nodes,
        "tasks_per_node": 1,
        "cpus_per_task": cluster.cpus_per_task,
        "mem_gb": cluster.mem_gb,
    }
    return params | cluster_kind(cluster).job_parameters(cluster, gpu_type_as)


def make_executor(cluster: ClusterConfig, job_name: str, gpu_type_as: str = "constraint") -> submitit.Executor:
    """An ``AutoExecutor`` for the cluster's executor; logs and pickles go to ``log_dir/<job id>/``."""
    executor = submitit.AutoExecutor(folder=Path(cluster.log_dir).resolve() / "%j", cluster=cluster_kind(cluster).submitit,
                                     slurm_max_num_timeout=cluster.max_requeues,
                                     local_max_num_timeout=cluster.max_requeues)
    executor.update_parameters(**executor_parameters(cluster, job_name, gpu_type_as))
    return executor


def submit(cluster: ClusterConfig, job_name: str, fn: Callable[[], Any], problems: Sequence[str] = ()) -> submitit.Job:
    """Check the cluster (plus the caller's ``problems``), then submit ``fn`` as one job.

    Raises :class:`streamgen.config.ConfigError` listing every problem (the caller's, the cluster
    config's, and what the partition cannot give) before anything is queued.
    """
    invalid = validate_cluster(cluster)
    found, gpu_type_as = ([], "constraint") if invalid else check_resources(cluster)  # what Slurm can give
    title = f"cannot submit job streamgen-{job_name}" if invalid or problems else \
        f"cluster {cluster.name!r} cannot run this job"
    raise_if_problems([*invalid, *problems, *found], f"{title}; nothing was submitted")
    job = make_executor(cluster, job_name, gpu_type_as).submit(fn)
    log.info("submitted job %s, streamgen-%s (executor %s, %d node(s)); logs in %s", job.job_id, job_name,
             cluster.executor, cluster.nodes, job.paths.folder)
    return job


def follow(job: submitit.Job, poll_s: float = POLL_S) -> Any:
    """Wait for ``job``, relaying its log lines; return rank 0's result or raise the job's error."""
    if isinstance(job, submitit.DebugJob):
        return job.results()[0]  # runs here, now
    offsets: dict[Path, int] = {}
    while not job.done():
        _relay(job, offsets)
        time.sleep(poll_s)
    _relay(job, offsets)
    return job.results()[0]


def _relay(job: submitit.Job, offsets: dict[Path, int]) -> None:
    for path in (job.paths.stdout, job.paths.stderr):
        if not path.exists():
            continue
        with open(path, "rb") as fh:
            fh.seek(offsets.get(path, 0))
            data = fh.read()
        cut = data.rfind(b"\n") + 1  # relay whole lines only
        offsets[path] = offsets.get(path, 0) + cut
        for line in data[:cut].decode(errors="replace").splitlines():
            log.info("[job %s] %s", job.job_id, line)
