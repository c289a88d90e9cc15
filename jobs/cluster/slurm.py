"""What is Slurm-specific in submitting a job: the ``sbatch`` parameters and the job's setup lines.

The dispatch (local / debug / slurm), the checks before submitting and following a job are
:mod:`jobs.cluster.executors`; what the partition offers and why a request can never run is
:mod:`jobs.cluster.slurm_partition`; the grid's job is :class:`jobs.cluster.executors.RayJob`.

Preemption and time limits: jobs are ``submitit.helpers.Checkpointable`` and submitted with
``--requeue``; on SIGUSR2 submitit calls the job's ``checkpoint``, which resubmits it unchanged.
Submitit treats a USR2 within the last 20 % of ``timeout_min`` (at least 10 min) as a time-out,
counted against ``max_requeues``; earlier ones are preemptions (always requeued).
"""

from __future__ import annotations

import shlex
from typing import Any

from jobs.run.local_ray import LOOPBACK_ENV, WORKER_ENV
from streamgen.config import REPO_ROOT, ClusterConfig


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
