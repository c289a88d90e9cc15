"""The ``local`` cluster kind: the work runs in this process, on this machine's CPUs and GPUs; nothing is submitted.

The driver starts its own Ray on loopback (:func:`jobs.run.local_ray.start_ray`) with ``ray.num_cpus`` or
workers + score_workers CPUs and the GPUs this machine has. No time limit and no memory booking bound the
work (:mod:`jobs.grid.allocation_fit` skips those rules). The functions below are this machine's answers,
which the ``debug`` kind shares.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from jobs.cluster.kind_protocol import Offer, TaskEnv, visible_gpus
from jobs.grid.allocation_fit import Shape, actors_per_node
from streamgen.config import ClusterConfig, GridConfig


def local_gpu_count() -> int:
    """GPUs on this machine per ``nvidia-smi -L`` (0 without it); never touches torch.cuda."""
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def one_node_problems(cluster: ClusterConfig) -> list[str]:
    """A kind that runs on this machine has one node."""
    if cluster.nodes != 1:
        return [f"cluster {cluster.name}: executor={cluster.executor} runs on this machine: set nodes=1"]
    return []


def this_machine_offer(cluster: ClusterConfig) -> Offer:
    """This machine's GPUs against ``gpus_per_node``."""
    visible = local_gpu_count()
    if cluster.gpus_per_node > visible:
        return Offer([f"cluster {cluster.name}: gpus_per_node={cluster.gpus_per_node} but this machine has "
                      f"{visible} GPU(s): set gpus_per_node={visible} (e.g. on the command line) or use "
                      f"a Slurm cluster file (e.g. cluster=slurm_a100)"], "constraint")
    return Offer([], "constraint")


def this_machine_parameters(cluster: ClusterConfig) -> dict[str, Any]:
    """submitit's generic GPU request, when GPUs are asked for."""
    return {"gpus_per_node": cluster.gpus_per_node} if cluster.gpus_per_node else {}


class LocalKind:
    """``executor: local``."""

    name = "local"
    submitit = "local"
    runs_here = True

    def problems(self, cluster: ClusterConfig) -> list[str]:
        return one_node_problems(cluster)

    def shape(self, grid: GridConfig, cluster: ClusterConfig) -> Shape:
        """The driver's local Ray: ``ray.num_cpus`` or workers + score_workers CPUs, this machine's GPUs
        (``ray.num_gpus`` wins), one node; the GPUs the cluster file declares are checked as declared."""
        ray = grid.ray
        gpus = ray.num_gpus if ray.num_gpus is not None else local_gpu_count()
        cpus = ray.num_cpus if ray.num_cpus is not None else grid.workers + grid.score_workers
        declared = ray.num_gpus if ray.num_gpus is not None else cluster.gpus_per_node
        return Shape(1, gpus, actors_per_node(grid, 1, gpus), cpus, declared)

    def offer(self, cluster: ClusterConfig) -> Offer:
        return this_machine_offer(cluster)

    def job_parameters(self, cluster: ClusterConfig, gpu_type_as: str) -> dict[str, Any]:
        return this_machine_parameters(cluster)

    def task_env(self, default_cpus: int) -> TaskEnv:
        return TaskEnv(default_cpus, visible_gpus())

    def prepare(self, grid: GridConfig, cluster: ClusterConfig) -> GridConfig:
        return grid  # the driver starts its own Ray
