"""The ``debug`` cluster kind: submitit's DebugExecutor runs the job in this process, on this machine.

The job takes the same path as on Slurm (:class:`jobs.cluster.executors.RayJob` starts Ray over the
"allocation", here one node), so a breakpoint works and the original exception is re-raised. Its task has
the CPUs the cluster file asks for and the GPUs ``CUDA_VISIBLE_DEVICES`` lists; no time limit and no memory
booking bound the work.
"""

from __future__ import annotations

from typing import Any

from jobs.cluster import local
from jobs.cluster.kind_protocol import Offer, TaskEnv, job_shape, visible_gpus
from jobs.grid.allocation_fit import Shape
from streamgen.config import ClusterConfig, GridConfig


class DebugKind:
    """``executor: debug``."""

    name = "debug"
    submitit = "debug"
    runs_here = False

    def problems(self, cluster: ClusterConfig) -> list[str]:
        return local.one_node_problems(cluster)

    def shape(self, grid: GridConfig, cluster: ClusterConfig) -> Shape:
        return job_shape(grid, cluster)

    def offer(self, cluster: ClusterConfig) -> Offer:
        return local.this_machine_offer(cluster)

    def job_parameters(self, cluster: ClusterConfig, gpu_type_as: str) -> dict[str, Any]:
        return local.this_machine_parameters(cluster)

    def task_env(self, default_cpus: int) -> TaskEnv:
        return TaskEnv(default_cpus, visible_gpus())

    def prepare(self, grid: GridConfig, cluster: ClusterConfig) -> GridConfig:
        return grid  # the driver starts its own Ray
