"""The adaptation's model stages (pairs, train, merge) as one submitit job on one GPU.

Same executors as the grid (``configs/cluster/<name>.yaml``: slurm / local / debug), the same dispatch
and checks before anything is queued (:mod:`jobs.cluster.executors`). :class:`AdaptJob` is ``Checkpointable``: on preemption or
time-out submitit calls :meth:`AdaptJob.checkpoint`, which requeues the same job; the rerun resumes
from the teacher cache and the newest training checkpoint (``streamgen.adapt.checkpoint``), so at
most ``save_every`` steps are repeated.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import submitit

from jobs.cluster import executors
from streamgen.adapt.config import AdaptConfig
from streamgen.config import ClusterConfig, cluster_config

log = logging.getLogger(__name__)


class AdaptJob(submitit.helpers.Checkpointable):
    """Run ``stages`` of the recipe ``cfg`` (paths absolute) inside the job; progress goes to the log."""

    def __init__(self, cfg: AdaptConfig, stages: tuple[str, ...]) -> None:
        self.cfg = cfg
        self.stages = stages
        self.attempt = 0

    def __call__(self) -> dict[str, str]:
        from streamgen.adapt.pipeline import run_stages

        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        log.info("adaptation %s: stages %s, attempt %d", self.cfg.name, self.stages, self.attempt)
        every = self.cfg.train.log_every

        def on_step(p: Any) -> None:
            if p.step % every == 0 or p.checkpoint:
                log.info("step %d/%d loss %.4f %.0f tok/s%s", p.step, p.steps, p.loss, p.tokens_per_s,
                         f" saved {p.checkpoint}" if p.checkpoint else "")

        return run_stages(self.cfg, self.stages, on_step=on_step)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Preempted or timed out: requeue; the rerun resumes from the cache and the newest checkpoint."""
        self.attempt += 1
        log.warning("checkpoint: requeueing adaptation %s (attempt %d)", self.cfg.name, self.attempt)
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def one_gpu(cluster: ClusterConfig) -> ClusterConfig:
    """Training uses one node and at most one GPU, whatever the grid's cluster asks for."""
    return dataclasses.replace(cluster, nodes=1, gpus_per_node=min(cluster.gpus_per_node, 1))


def submit(cfg: AdaptConfig, stages: tuple[str, ...], cluster: ClusterConfig | None = None) -> submitit.Job:
    """Check the cluster, then submit one :class:`AdaptJob`; raises ConfigError before queueing."""
    from streamgen.adapt.pipeline import absolute

    cluster = one_gpu(cluster or cluster_config(cfg.cluster))
    return executors.submit(cluster, f"adapt-{cfg.name}", AdaptJob(absolute(cfg), stages))


def run(cfg: AdaptConfig, stages: tuple[str, ...], here: Callable[[], dict[str, str]],
        cluster: ClusterConfig | None = None) -> dict[str, str]:
    """The stages where the recipe's cluster says: ``here()`` for ``executor: local``, else one job,
    waited for with its log relayed; returns the stages' output paths."""
    cluster = cluster or cluster_config(cfg.cluster)
    return executors.run(cluster, here=here, job=lambda: submit(cfg, stages, cluster))
