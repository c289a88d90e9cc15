"""The ``slurm`` cluster kind: one ``sbatch`` job through submitit; what is Slurm-specific lives here.

:class:`SlurmKind` answers the cluster kind's questions (:mod:`jobs.cluster.kind_protocol`) for Slurm: the
``sbatch`` parameters and the job's setup lines, what the partition offers (:mod:`jobs.cluster.slurm_partition`),
the allocation the resource rules see (the job's time limit and ``mem_gb`` bound the work), and inside the job
what the task was given (``SLURM_CPUS_PER_TASK``, ``SLURM_GPUS_ON_NODE``, ``SLURMD_NODENAME``,
``SLURM_RESTART_COUNT``: the only place that reads Slurm's variables). The dispatch, the checks before submitting
and following a job are :mod:`jobs.cluster.executors`; the grid's job is :class:`jobs.cluster.executors.RayJob`.

Preemption and time limits: jobs are ``submitit.helpers.Checkpointable`` and submitted with
``--requeue``; on SIGUSR2 submitit calls the job's ``checkpoint``, which resubmits it unchanged.
Submitit treats a USR2 within the last 20 % of ``timeout_min`` (at least 10 min) as a time-out,
counted against ``max_requeues``; earlier ones are preemptions (always requeued).
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from jobs.cluster import slurm_partition
from jobs.cluster.kind_protocol import Offer, TaskEnv, job_shape, visible_gpus
from jobs.grid.allocation_fit import Shape
from jobs.run.local_ray import LOOPBACK_ENV, WORKER_ENV
from streamgen.config import REPO_ROOT, ClusterConfig, GridConfig


def job_setup_lines(cluster: ClusterConfig) -> list[str]:
    """Shell lines before the job: the site's own (module load ...), then this checkout and Ray's env."""
    lines = list(cluster.setup)
    lines.append(f"cd {shlex.quote(str(REPO_ROOT))}")
    lines.append(f'export PYTHONPATH={shlex.quote(str(REPO_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    env = dict(WORKER_ENV)
    if cluster.nodes == 1:  # one node: Ray stays on loopback
        env.update(LOOPBACK_ENV)
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    return lines


def slurm_parameters(cluster: ClusterConfig, gpu_type_as: str = "constraint") -> dict[str, Any]:
    """submitit's ``slurm_*`` parameters (and how GPUs are asked for) for a ``slurm`` cluster; pure.

    ``gpu_type_as``: ``constraint`` (the type is a node feature: ``--constraint=a100``) or ``gres``
    (a typed GRES: ``--gres=gpu:a100:N``), as :func:`jobs.cluster.slurm_partition.check` found it.
    """
    params: dict[str, Any] = {}
    extra: dict[str, Any] = {"requeue": True}
    if cluster.gpus_per_node and cluster.gpu_type and gpu_type_as == "gres":
        extra["gres"] = f"gpu:{cluster.gpu_type}:{cluster.gpus_per_node}"
    elif cluster.gpus_per_node:
        params["gpus_per_node"] = cluster.gpus_per_node
    optional = {"slurm_partition": cluster.partition, "slurm_account": cluster.account,
                "slurm_qos": cluster.qos,
                "slurm_constraint": cluster.gpu_type if gpu_type_as == "constraint" else None}
    params.update({k: v for k, v in optional.items() if v})
    params.update(slurm_setup=job_setup_lines(cluster), slurm_additional_parameters=extra)
    return params


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "").split("(")[0]  # e.g. SLURM_CPUS_ON_NODE or '2(x3)'
    return int(value) if value.isdigit() else None


class SlurmKind:
    """``executor: slurm``."""

    name = "slurm"
    submitit = "slurm"
    runs_here = False

    def problems(self, cluster: ClusterConfig) -> list[str]:
        return []

    def shape(self, grid: GridConfig, cluster: ClusterConfig) -> Shape:
        """A job's Ray; its time limit bounds each unit and the whole run, and ``mem_gb`` each node."""
        return job_shape(grid, cluster, time_limit="Slurm time limit", books_memory=True)

    def offer(self, cluster: ClusterConfig) -> Offer:
        """The partition's inventory (``sinfo``) against the request."""
        inv = slurm_partition.query(cluster.partition)
        return Offer(slurm_partition.check(cluster, inv), inv.gpu_type_mode(cluster.gpu_type))

    def job_parameters(self, cluster: ClusterConfig, gpu_type_as: str) -> dict[str, Any]:
        return slurm_parameters(cluster, gpu_type_as)

    def task_env(self, default_cpus: int) -> TaskEnv:
        """The allocation's counts, never the machine's: Ray otherwise sees the whole node (ray #13607)."""
        cpus = _int_env("SLURM_CPUS_PER_TASK") or _int_env("SLURM_CPUS_ON_NODE") or default_cpus
        gpus = _int_env("SLURM_GPUS_ON_NODE")
        return TaskEnv(cpus, visible_gpus() if gpus is None else gpus, os.environ.get("SLURMD_NODENAME") or None,
                       os.environ.get("SLURM_RESTART_COUNT", "0"))

    def prepare(self, grid: GridConfig, cluster: ClusterConfig) -> GridConfig:
        return grid  # never runs here: the job starts Ray over its allocation (executors.RayJob)
