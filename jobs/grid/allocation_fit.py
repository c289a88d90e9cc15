"""The allocation checked against the work, before anything is queued: GPUs, memory, CPUs, time.

Run by ``jobs.grid.plan.plan_grid`` when it is given the cluster and its Ray's shape
(``jobs.cluster.executors.allocation``): by ``--dry-run``, at the start of every run the workflows start
(``run_grid_on_cluster``) and on a job's head node again; and by ``jobs.cluster.executors.submit_grid``
before Slurm books anything. Its
problems join the plan's others in ONE :class:`~streamgen.config.ConfigError`, each naming its fix.
With G GPUs per node, N nodes, W = ``workers``, S = ``score_workers`` and A model actors on a node
(``min(W, G)`` with GPUs, else ``ceil(W / N)``), the rules (docs/cluster.md shows the arithmetic):

- a model with ``source: hub`` (the study's 7–12 B checkpoints) needs G ≥ 1: one GPU per model actor;
- ``W ≤ N × G`` when G ≥ 1 is declared (``gpus_per_node`` or ``ray.num_gpus``; one model actor per GPU:
  the driver would otherwise cap W with a warning, as it still does on a local machine's GPUs found
  but not declared);
- with GPUs, Ray's CPUs per node ≥ A + S: every GPU actor reserves one CPU (:mod:`jobs.run.actors`) for its
  batch-1 launch loop, and the S scorers' sandbox programs get CPUs of their own wherever they land;
- where the job books memory (``Shape.books_memory``: Slurm), ``mem_gb`` (GiB) ≥ object store + A × the grid's biggest model at its dtype (they load at
  once) + headroom (``HEADROOM_BASE_GIB`` + ``HEADROOM_PER_ACTOR_GIB`` × A: Ray's daemons, the driver,
  each actor's Python, torch and CUDA host context);
- each work unit's estimated seconds ≤ ``UNIT_TIME_FRACTION`` × the smaller of the unit timeout
  (``shard_timeout_s`` × shards per unit) and the job's time limit where one binds (``Shape.time_limit``: Slurm's): a unit killed at either
  limit is decoded again from its start (or from its finished examples, once those resume);
- under a job time limit, the whole run's estimated wall ≤ ``timeout_min`` × (``max_requeues`` + 1): what one job and
  its time-out requeues can give (a time-out that finished work is not counted: ``jobs.cluster.executors``);
- ``rehearsal: true`` (fake GPUs; actors run on CPU, :func:`jobs.run.actors.pick_device`) only with G ≥ 1
  and no hub model.

A running cluster's shape (``Shape.fixed``: the ``ray`` kind, :mod:`jobs.cluster.existing_ray`) is read from the
cluster itself, memory included (``Shape.mem_gib``); its size is given, so each fix names the work (``workers``,
``score_workers``, the models) or more nodes, never a knob of the cluster file.

What the work needs comes in as :class:`WorkFacts`: model bytes and unit seconds. :func:`known_facts`
gives what is known without an estimate (tiny and scripted models are under ``SMALL_MODEL_BYTES``);
an unknown value skips its part of a rule with a note, never silently.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from jobs.grid.shards import acceptance_rules
from streamgen.config import ClusterConfig, GridConfig, ModelConfig

log = logging.getLogger(__name__)

GIB = 2**30
HEADROOM_BASE_GIB = 4.0  # per node: Ray's raylet, GCS and object manager, the driver (rank 0), the OS
HEADROOM_PER_ACTOR_GIB = 2.0  # per model actor: Python, torch, the CUDA context's host side
UNIT_TIME_FRACTION = 0.5  # a unit's estimate must stay within this share of its limits
GPU_SOURCES = ("hub",)  # real checkpoints of the study's size; local folders are adapted small models
SMALL_SOURCES = ("tiny", "scripted")
SMALL_MODEL_BYTES = 16 * 2**20  # tiny and scripted models are smaller (tests/jobs/grid/test_allocation_fit.py measures them)


@dataclass(frozen=True)
class WorkFacts:
    """What the work needs, as far as it is known (None or absent: not known, that check is skipped).

    ``model_bytes``: a model's weights at its dtype, in bytes; ``unit_seconds``: per (model, benchmark),
    the estimated seconds of its longest work unit (``jobs.grid.units``: a shard of each acceptance
    cell, ``shard_size`` examples).
    """

    model_bytes: Mapping[str, int | None] = field(default_factory=dict)
    unit_seconds: Mapping[tuple[str, str], float | None] = field(default_factory=dict)
    run_seconds: float | None = None  # the whole run's estimated wall on the allocation (jobs.grid.gpu_hours)


@dataclass(frozen=True)
class ResourceCheck:
    """Problems (each with its fix) and notes (checks skipped for want of a fact)."""

    problems: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Shape:
    """The allocation as the rules see it: nodes, GPUs and Ray CPUs per node, model actors per node."""

    nodes: int
    gpus_per_node: int  # what Ray has (a local run: what this machine has, unless ray.num_gpus says)
    actors_per_node: int
    ray_cpus_per_node: int
    gpus_declared: int = -1  # per node, by the cluster file or ray.num_gpus (-1: = gpus_per_node); 0 none
    # the job's time limit (``timeout_min``) by its name in messages, when one bounds each unit and the whole run
    # (Slurm's); None: nothing does (a local run, a debug job)
    time_limit: str | None = None
    books_memory: bool = False  # each node is held to ``mem_gb`` (Slurm); False: memory is not checked
    mem_gib: float | None = None  # per node, as a running cluster reports it (None: the cluster file's ``mem_gb``)
    # a running cluster's shape, described (its address and nodes): what it has is given, not asked for
    fixed: str | None = None

    @property
    def declared(self) -> int:
        return self.gpus_per_node if self.gpus_declared < 0 else self.gpus_declared

    @property
    def gpus(self) -> int:
        return self.nodes * self.declared


def known_facts(models: Mapping[str, ModelConfig]) -> WorkFacts:
    """Facts known without an estimate: tiny and scripted models' bytes (at most ``SMALL_MODEL_BYTES``)."""
    return WorkFacts({name: SMALL_MODEL_BYTES if cfg.source in SMALL_SOURCES else None
                      for name, cfg in models.items()})


def actors_per_node(grid: GridConfig, nodes: int, gpus_per_node: int) -> int:
    """Model actors on one node: one per GPU up to ``workers``; without GPUs, workers spread over the nodes."""
    return min(grid.workers, gpus_per_node) if gpus_per_node else math.ceil(grid.workers / max(1, nodes))


def check(grid: GridConfig, cluster: ClusterConfig, models: Mapping[str, ModelConfig], s: Shape,
          facts: WorkFacts | None = None) -> ResourceCheck:
    """Every rule of the module docstring for ``grid`` on ``cluster``, whose Ray has shape ``s``
    (``jobs.cluster.executors.allocation``: the cluster kind says what a local Ray or a job's is, and which
    limits bind it)."""
    facts = facts or known_facts(models)
    where = f"cluster {cluster.name!r}" + (f" ({s.fixed})" if s.fixed else "")
    problems = [*_gpu_problems(grid, cluster, models, s, where), *_cpu_problems(grid, cluster, s, where)]
    notes: list[str] = []
    if s.books_memory:
        _memory(grid, cluster, facts, s, where, problems, notes)
    _unit_time(grid, cluster, facts, s, problems, notes)
    if s.time_limit is not None:
        _run_time(cluster, facts, problems, notes)
    return ResourceCheck(tuple(problems), tuple(notes))


def _gpu_problems(grid: GridConfig, cluster: ClusterConfig, models: Mapping[str, ModelConfig], s: Shape,
                  where: str) -> list[str]:
    hub = sorted(n for n, cfg in models.items() if cfg.source in GPU_SOURCES)
    p: list[str] = []
    if hub and s.gpus_per_node < 1:
        fix = ("add GPU nodes to the cluster, or run a smaller model set (e.g. models=[tiny-llama])" if s.fixed else
               "use a GPU cluster file (e.g. cluster=slurm_a100) or set gpus_per_node ≥ 1")
        p.append(f"{where} gives no GPU, but {', '.join(hub)} load hub checkpoints: each model actor needs one "
                 f"GPU; {fix}")
    if s.declared >= 1 and grid.workers > s.gpus:  # GPUs found, not declared: the driver caps workers (a warning)
        more = "add GPU nodes to the cluster" if s.fixed else "ask for more GPUs (nodes, gpus_per_node)"
        p.append(f"workers={grid.workers} but {where} has {s.nodes} node(s) × {s.declared} GPU(s) = {s.gpus}: "
                 f"one model actor per GPU; set workers={s.gpus} or {more}")
    if cluster.rehearsal and s.gpus_per_node < 1:
        fix = ("start its nodes with GPUs (ray start --num-gpus), or set rehearsal: false" if s.fixed else
               "set gpus_per_node ≥ 1, or rehearsal: false")
        p.append(f"{where}: rehearsal: true rehearses GPU scheduling on fake GPUs but gpus_per_node="
                 f"{s.gpus_per_node if s.fixed else cluster.gpus_per_node}: {fix}")
    if cluster.rehearsal and hub:
        p.append(f"{where}: rehearsal: true runs every model on CPU, but {', '.join(hub)} load hub checkpoints: "
                 "rehearse with tiny models (models=[tiny-llama,...]), or set rehearsal: false on real GPUs")
    return p


def _cpu_problems(grid: GridConfig, cluster: ClusterConfig, s: Shape, where: str) -> list[str]:
    need = s.actors_per_node + grid.score_workers
    if s.gpus_per_node < 1 or s.ray_cpus_per_node >= need:
        return []
    if s.fixed:
        fix = (f"lower score_workers or workers (they need {need} = {s.actors_per_node} + {grid.score_workers}), "
               f"or add nodes with {need} CPUs or more")
    else:
        knob = "ray.num_cpus" if grid.ray.num_cpus is not None else "cpus_per_task"  # a local Ray has W + S
        fix = f"set {knob}={need} or more ({s.actors_per_node} + {grid.score_workers}), or lower score_workers"
    return [f"{where}: Ray has {s.ray_cpus_per_node} CPU(s) per node, but {s.actors_per_node} GPU actor(s) there "
            f"reserve one each and the {grid.score_workers} scorer(s) need theirs: {fix}"]


def _memory(grid: GridConfig, cluster: ClusterConfig, facts: WorkFacts, s: Shape, where: str,
            problems: list[str], notes: list[str]) -> None:
    known = {m: b for m in grid.models if (b := facts.model_bytes.get(m)) is not None}
    if unknown := sorted(m for m in grid.models if m not in known):
        notes.append(f"memory: the bytes of {', '.join(unknown)} are not known (the estimate fills them): "
                     "node memory is checked without them")
    biggest = max(known.values(), default=0) / GIB
    store = grid.ray.object_store_mb / 1024
    headroom = HEADROOM_BASE_GIB + HEADROOM_PER_ACTOR_GIB * s.actors_per_node
    need = store + s.actors_per_node * biggest + headroom
    models = (f"{s.actors_per_node} actor(s) × {biggest:.1f} GiB (the biggest model, loading at once)" if known
              else "the models (bytes not known yet: not counted)")
    has = s.mem_gib if s.mem_gib is not None else cluster.mem_gb
    if has < need:
        given = f"a node has {has:.1f} GiB" if s.fixed else f"mem_gb={cluster.mem_gb}"
        fix = (f"lower workers or run smaller models, or add nodes with {math.ceil(need)} GiB or more" if s.fixed else
               f"set mem_gb={math.ceil(need)} or more, or lower workers / ray.object_store_mb")
        problems.append(
            f"{where}: {given} but a node needs {need:.1f} GiB = object store {store:.1f} + "
            f"{models} + headroom {headroom:.1f} ({HEADROOM_BASE_GIB:g} + {HEADROOM_PER_ACTOR_GIB:g} per actor × "
            f"{s.actors_per_node}): {fix}")


def shards_per_unit(grid: GridConfig) -> int:
    """Shards one work unit decodes together (``jobs.grid.units``): every acceptance cell of an
    example chunk when work is shared (live cells never share)."""
    shared = grid.share_work and grid.typing.live_policy is None
    return max(1, len(acceptance_rules(grid))) if shared else 1


def _unit_time(grid: GridConfig, cluster: ClusterConfig, facts: WorkFacts, s: Shape, problems: list[str],
               notes: list[str]) -> None:
    # shard_size: auto gives each unit a timeout of a multiple of its own estimate (jobs.grid.unit_sizing):
    # only the job's time limit bounds it
    limits = {} if grid.shard_size == "auto" else {"unit timeout": grid.shard_timeout_s * shards_per_unit(grid)}
    if s.time_limit is not None:
        limits[s.time_limit] = cluster.timeout_min * 60.0
    if not limits:
        return
    name, limit = min(limits.items(), key=lambda kv: kv[1])
    allowed = UNIT_TIME_FRACTION * limit
    unknown = []
    for model in grid.models:
        for bench in grid.benchmarks:
            seconds = facts.unit_seconds.get((model, bench))
            if seconds is None:
                unknown.append(f"{model} / {bench}")
            elif seconds > allowed:
                problems.append(_unit_line(grid, model, bench, seconds, allowed, name, limit))
    if unknown:
        notes.append(f"unit time: no estimate for {len(unknown)} (model, benchmark) pair(s) (the estimate fills "
                     f"them): not checked against {UNIT_TIME_FRACTION:g} × the {name} ({limit:,.0f} s)")


def _run_time(cluster: ClusterConfig, facts: WorkFacts, problems: list[str], notes: list[str]) -> None:
    """The whole run against what the job can give: the time limit × (time-outs that requeue + 1). A
    time-out after which more work is finished does not count (``jobs.cluster.executors.RayJob.checkpoint``), so
    this holds a run whose every attempt makes progress to the allocation's own budget."""
    if facts.run_seconds is None:
        notes.append("run time: no estimate of the whole run; not checked against the time limit × (max_requeues + 1)")
        return
    limit = cluster.timeout_min * 60.0
    budget = limit * (cluster.max_requeues + 1)
    if facts.run_seconds <= budget:
        return
    attempts = math.ceil(facts.run_seconds / limit)
    problems.append(
        f"the whole run: estimated {facts.run_seconds / 3600:,.1f} h of wall on the allocation, over the "
        f"{cluster.timeout_min}-minute time limit × (max_requeues={cluster.max_requeues} + 1) = {budget / 3600:,.1f} h: "
        f"set max_requeues={attempts - 1} (time-outs that finished work are not counted against it), or give the "
        f"run more GPUs (nodes / gpus_per_node, and workers), or run fewer cells (models, benchmarks, taus)")


def _unit_line(grid: GridConfig, model: str, bench: str, seconds: float, allowed: float, name: str,
               limit: float) -> str:
    if grid.shard_size == "auto":  # units already cut as small as the estimate allows
        fix = "its longest example alone takes that long: raise timeout_min (or run that benchmark on a faster device)"
    else:
        size = math.floor(grid.shard_size * allowed / seconds)
        fix = (f"set shard_size={size} (now {grid.shard_size}) or shard_size: auto" if size >= 1 else
               f"even one example ({seconds / grid.shard_size:,.0f} s) is too long: raise shard_timeout_s and timeout_min")
    return (f"work units of {model} / {bench}: estimated {seconds:,.0f} s, over {UNIT_TIME_FRACTION:g} × the "
            f"{name} ({limit:,.0f} s) = {allowed:,.0f} s; a unit killed there is requeued and resumes from its spool, the killed example again: {fix}")
