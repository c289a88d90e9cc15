"""What a cluster kind is: the :class:`ClusterKind` Protocol and the values its members return.

A cluster kind is what ``executor:`` names in ``configs/cluster/<name>.yaml``: ``local`` (the work runs in
this process), ``debug`` (submitit's in-process job), ``slurm`` (an ``sbatch`` job) or ``ray`` (the work runs in
this process on a Ray cluster that is already up). Every place that once
branched on that string asks the kind instead: the checks before submitting (:mod:`jobs.cluster.executors`),
the allocation the resource rules see (:mod:`jobs.grid.allocation_fit`, through :class:`~jobs.grid.allocation_fit.Shape`),
and what a job's task was given when it starts Ray (:mod:`jobs.cluster.ray_cluster`, through :class:`TaskEnv`).
The kinds are listed in :mod:`jobs.cluster.kinds`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from jobs.grid.allocation_fit import Shape, actors_per_node
from streamgen.config import ClusterConfig, GridConfig


class Offer(NamedTuple):
    """What the cluster can really give: every reason the request can never run (each naming its fix), and
    how a GPU type is asked for (``constraint``: a node feature; ``gres``: a typed GRES)."""

    problems: list[str]
    gpu_type_as: str


@dataclass(frozen=True)
class TaskEnv:
    """What one task of a job was given, as its scheduler tells it (read inside the job, before Ray starts)."""

    cpus: int
    gpus: int
    node_name: str | None = None  # the name other nodes know this one by (None: the host's own name)
    restart: str = "0"  # how often the job was requeued: a requeued run must not read the last run's files


@runtime_checkable
class ClusterKind(Protocol):
    """One kind of cluster. An implementation is a class with these members in its own module."""

    name: str  # the ``executor`` value of its YAMLs
    submitit: str  # submitit's AutoExecutor ``cluster`` that submits its jobs ("local", "debug", "slurm")
    runs_here: bool  # True: the work runs in this process, no job is submitted (``local``)

    def problems(self, cluster: ClusterConfig) -> list[str]:
        """Problems of ``cluster`` that only this kind has (no cluster contacted); each names the fix."""
        ...

    def shape(self, grid: GridConfig, cluster: ClusterConfig) -> Shape:
        """The Ray the grid will run on, as the resource rules see it (:mod:`jobs.grid.allocation_fit`)."""
        ...

    def offer(self, cluster: ClusterConfig) -> Offer:
        """What the cluster can really give against what ``cluster`` asks (this machine's GPUs, a partition)."""
        ...

    def job_parameters(self, cluster: ClusterConfig, gpu_type_as: str) -> dict[str, Any]:
        """This kind's submitit parameters, beyond the generic ones (name, time, nodes, CPUs, memory)."""
        ...

    def task_env(self, default_cpus: int) -> TaskEnv:
        """Inside a job: the CPUs and GPUs this task was given, its node name and its requeue count."""
        ...

    def prepare(self, grid: GridConfig, cluster: ClusterConfig) -> GridConfig:
        """Before the driver runs in this process (``runs_here``): what the kind must do first, and the grid to
        run (``ray``: attach, check the running cluster and its nodes' reach of ``results_dir``)."""
        ...


def job_shape(grid: GridConfig, cluster: ClusterConfig, *, time_limit: str | None = None,
              books_memory: bool = False) -> Shape:
    """A job's Ray: ``cpus_per_task`` and ``gpus_per_node`` on each of its nodes (:mod:`jobs.cluster.ray_cluster`);
    ``ray.num_cpus`` / ``ray.num_gpus`` win when set."""
    ray = grid.ray
    gpus = ray.num_gpus if ray.num_gpus is not None else cluster.gpus_per_node
    cpus = ray.num_cpus if ray.num_cpus is not None else cluster.cpus_per_task
    nodes = max(1, cluster.nodes)
    return Shape(nodes, gpus, actors_per_node(grid, nodes, gpus), cpus, gpus, time_limit, books_memory)


def visible_gpus() -> int:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` lists (0 when unset or empty)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return len([d for d in visible.split(",") if d.strip()])
