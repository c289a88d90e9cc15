"""The allocation checked against the work (jobs/grid/allocation_fit.py): every rule passes at its boundary and
refuses just past it, with the boundary computed here from the rule's own terms; the shipped cluster
files against the study's grid; the one message of a dry run that asks too little."""

from __future__ import annotations

import dataclasses
import math

import pytest

from jobs.cluster import executors
from jobs.cluster import local as local_kind
from jobs.grid import allocation_fit
from jobs.grid.allocation_fit import (
    GIB,
    HEADROOM_BASE_GIB,
    HEADROOM_PER_ACTOR_GIB,
    UNIT_TIME_FRACTION,
    WorkFacts,
)
from jobs.grid.checkpoint_preflight import grid_models
from jobs.run.actors import GPU_ACTOR_CPUS, actor_options
from streamgen.config import (
    ClusterConfig,
    GridConfig,
    ModelConfig,
    RayConfig,
    cluster_config,
    grid_config,
    model_config,
)

HUB = ModelConfig(name="big", source="hub", path="org/big", dtype="bfloat16")
TINY = ModelConfig(name="tiny-llama", source="tiny", tiny_arch="llama")


def _slurm(**kw: object) -> ClusterConfig:
    base = dict(name="c", executor="slurm", nodes=1, gpus_per_node=8, cpus_per_task=64, mem_gb=1024, timeout_min=600)
    return ClusterConfig(**{**base, **kw})  # type: ignore[arg-type]


def _grid(**kw: object) -> GridConfig:
    base = dict(models=["big"], benchmarks=["coedit"], workers=8, score_workers=4, shard_timeout_s=3600.0,
                acceptance=["greedy"], ray=RayConfig(object_store_mb=1024))
    return GridConfig(**{**base, **kw})  # type: ignore[arg-type]


def _problems(grid: GridConfig, cluster: ClusterConfig, models: dict[str, ModelConfig] | None = None,
              facts: WorkFacts | None = None) -> tuple[str, ...]:
    models = models if models is not None else {"big": HUB}
    return allocation_fit.check(grid, cluster, models, executors.allocation(grid, cluster), facts).problems


def test_hub_models_need_a_gpu_per_actor_tiny_ones_do_not() -> None:
    (line,) = _problems(_grid(workers=1), _slurm(gpus_per_node=0))
    assert "gives no GPU" in line and "big load hub checkpoints" in line and "gpus_per_node ≥ 1" in line
    assert _problems(_grid(workers=1), _slurm(gpus_per_node=1)) == ()
    assert _problems(_grid(workers=1, models=["tiny-llama"]), _slurm(gpus_per_node=0), {"tiny-llama": TINY}) == ()


def test_workers_at_most_nodes_times_gpus() -> None:
    nodes, gpus = 2, 3
    cluster = _slurm(nodes=nodes, gpus_per_node=gpus)
    assert _problems(_grid(workers=nodes * gpus), cluster) == ()
    (line,) = _problems(_grid(workers=nodes * gpus + 1), cluster)
    assert f"workers={nodes * gpus + 1}" in line and f"set workers={nodes * gpus}" in line


def test_a_cpu_per_gpu_actor_plus_the_scorers() -> None:
    gpus, workers, scorers = 4, 3, 2
    need = min(workers, gpus) * GPU_ACTOR_CPUS + scorers  # actors on the node reserve one each
    grid = _grid(workers=workers, score_workers=scorers)
    assert _problems(grid, _slurm(gpus_per_node=gpus, cpus_per_task=need)) == ()
    (line,) = _problems(grid, _slurm(gpus_per_node=gpus, cpus_per_task=need - 1))
    assert f"set cpus_per_task={need} or more" in line and f"{min(workers, gpus)} GPU actor(s)" in line
    cpu_only = _grid(models=["tiny-llama"], workers=4, score_workers=4)  # CPU actors: the rule is about GPU actors
    assert _problems(cpu_only, _slurm(gpus_per_node=0, cpus_per_task=1), {"tiny-llama": TINY}) == ()


def test_ray_num_cpus_wins_and_is_the_knob_named() -> None:
    grid = _grid(workers=2, score_workers=1, ray=RayConfig(object_store_mb=1024, num_cpus=2))
    (line,) = _problems(grid, _slurm(gpus_per_node=2))
    assert "Ray has 2 CPU(s) per node" in line and "set ray.num_cpus=3" in line


def test_node_memory_holds_store_models_loading_at_once_and_headroom() -> None:
    gpus, workers, store_mb, model_bytes = 4, 2, 3072, 5 * GIB
    actors = min(workers, gpus)
    need = store_mb / 1024 + actors * model_bytes / GIB + HEADROOM_BASE_GIB + HEADROOM_PER_ACTOR_GIB * actors
    assert need == math.ceil(need)  # chosen whole, so mem_gb can sit exactly on it
    grid = _grid(workers=workers, ray=RayConfig(object_store_mb=store_mb))
    facts = WorkFacts({"big": model_bytes})
    assert _problems(grid, _slurm(gpus_per_node=gpus, mem_gb=int(need)), facts=facts) == ()
    (line,) = _problems(grid, _slurm(gpus_per_node=gpus, mem_gb=int(need) - 1), facts=facts)
    assert f"mem_gb={int(need) - 1}" in line and f"set mem_gb={int(need)} or more" in line
    assert f"{actors} actor(s) × 5.0 GiB" in line


def test_the_biggest_model_counts_and_unknown_bytes_are_a_note() -> None:
    models = {"big": HUB, "tiny-llama": TINY}
    grid = _grid(models=list(models), workers=1)
    facts = WorkFacts({"big": None, "tiny-llama": 10 * GIB})  # the known one is the biggest known
    need = 1 + 10 + HEADROOM_BASE_GIB + HEADROOM_PER_ACTOR_GIB
    cluster = _slurm(gpus_per_node=1, mem_gb=int(need))
    fit = allocation_fit.check(grid, cluster, models, executors.allocation(grid, cluster), facts)
    assert fit.problems == ()
    assert any("bytes of big are not known" in n and "checked without them" in n for n in fit.notes)
    assert _problems(grid, dataclasses.replace(cluster, mem_gb=int(need) - 1), models, facts)


def test_memory_is_a_slurm_rule() -> None:
    local = ClusterConfig(name="l", executor="local", mem_gb=1)  # a local run is not given mem_gb
    assert _problems(_grid(models=["tiny-llama"], workers=1), local, {"tiny-llama": TINY}) == ()


def test_units_stay_within_a_fraction_of_the_smaller_limit() -> None:
    grid = _grid(acceptance=["greedy", "threshold"], taus=[0.5, 0.9], shard_timeout_s=1000.0, shard_size=8)
    shards_per_unit = 1 + 2  # greedy and each τ share one work unit
    assert allocation_fit.shards_per_unit(grid) == shards_per_unit
    unit_timeout, slurm_limit = 1000.0 * shards_per_unit, 40 * 60.0
    allowed = UNIT_TIME_FRACTION * min(unit_timeout, slurm_limit)
    cluster = _slurm(timeout_min=40)
    ok = WorkFacts({}, {("big", "coedit"): allowed})
    assert _problems(grid, cluster, facts=ok) == ()
    over = WorkFacts({}, {("big", "coedit"): allowed + 1})
    (line,) = _problems(grid, cluster, facts=over)
    assert "Slurm time limit (2,400 s)" in line and f"= {allowed:,.0f} s" in line
    assert f"set shard_size={math.floor(8 * allowed / (allowed + 1))} (now 8)" in line
    local = ClusterConfig(name="l", executor="local")  # no Slurm limit: the unit timeout alone
    grid_gpu = dataclasses.replace(grid, ray=RayConfig(object_store_mb=1024, num_gpus=8))
    bound = UNIT_TIME_FRACTION * unit_timeout
    assert _problems(grid_gpu, local, facts=WorkFacts({}, {("big", "coedit"): bound})) == ()
    assert _problems(grid_gpu, local, facts=WorkFacts({}, {("big", "coedit"): bound + 1}))


def test_unknown_unit_seconds_are_a_note() -> None:
    grid, cluster = _grid(), _slurm()
    fit = allocation_fit.check(grid, cluster, {"big": HUB}, executors.allocation(grid, cluster))
    assert fit.problems == () and any(n.startswith("unit time: no estimate for 1") for n in fit.notes)


def test_rehearsal_only_with_gpus_and_without_hub_models() -> None:
    tiny = {"tiny-llama": TINY}
    grid = _grid(models=["tiny-llama"], workers=2)
    assert _problems(grid, _slurm(gpus_per_node=2, rehearsal=True), tiny) == ()
    (line,) = _problems(grid, _slurm(gpus_per_node=0, rehearsal=True), tiny)
    assert "rehearsal: true" in line and "set gpus_per_node ≥ 1" in line
    (line,) = _problems(_grid(workers=2), _slurm(gpus_per_node=2, rehearsal=True))
    assert "runs every model on CPU" in line and "big load hub checkpoints" in line


def test_every_problem_at_once() -> None:
    grid = _grid(workers=9, score_workers=4)
    problems = _problems(grid, _slurm(gpus_per_node=0, cpus_per_task=1, mem_gb=1))
    assert len(problems) == 2  # no GPU for the hub model; memory. (workers vs GPUs needs GPUs declared)
    problems = _problems(grid, _slurm(gpus_per_node=8, cpus_per_task=1, mem_gb=1))
    assert len(problems) == 3  # workers > GPUs, CPUs, memory


def test_allocation_local_ray_has_workers_plus_scorers_cpus() -> None:
    """The README's main command (grid local, cluster local: 2 CPU actors + 1 scorer) fits the Ray it
    starts; a local GPU run's actors reserve a CPU each within the same count."""
    grid, local = grid_config("local"), cluster_config("local")
    shape = executors.allocation(grid, local)
    assert shape.ray_cpus_per_node == grid.workers + grid.score_workers and shape.nodes == 1
    assert allocation_fit.check(grid, local, grid_models(grid), shape).problems == ()
    gpu = dataclasses.replace(grid, workers=1, ray=dataclasses.replace(grid.ray, num_gpus=1))
    shape = executors.allocation(gpu, local)
    assert (shape.gpus_per_node, shape.actors_per_node, shape.ray_cpus_per_node) == (1, 1, 1 + grid.score_workers)
    assert allocation_fit.check(gpu, local, grid_models(gpu), shape).problems == ()
    assert allocation_fit.check(dataclasses.replace(gpu, workers=2), local, grid_models(gpu), shape).problems


def test_gpu_actors_reserve_a_cpu_cpu_actors_their_share() -> None:
    assert actor_options(use_gpu=True)["num_cpus"] == GPU_ACTOR_CPUS == 1
    assert actor_options(use_gpu=True)["num_gpus"] == 1
    assert actor_options(use_gpu=False, cpus_per_actor=1.0) == {**actor_options(use_gpu=False), "num_cpus": 1.0}


def test_small_models_are_under_their_bound() -> None:
    """known_facts counts tiny and scripted models as SMALL_MODEL_BYTES: measured here, all are below."""
    from streamgen.families.registry import model_family

    names = ["tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-llada", "tiny-dream", "tiny-refusion",
             "tiny-diffusiongemma", "scripted-ar-constant"]
    for name in names:
        cfg = model_config(name)
        model = model_family(cfg.family).load(cfg, "cpu").model
        size = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
        assert 0 < size <= allocation_fit.SMALL_MODEL_BYTES, (name, size)
        assert allocation_fit.known_facts({name: cfg}).model_bytes[name] == allocation_fit.SMALL_MODEL_BYTES
    assert allocation_fit.known_facts({"big": HUB}).model_bytes["big"] is None


# --------------------------------------------------------------------------------------------
# The shipped files against the study's grid
# --------------------------------------------------------------------------------------------

GEMMA_12B_BYTES = int(12.2e9 * 2)  # the biggest study model in bf16 (configs/cluster/slurm_a100.yaml comments)


@pytest.mark.parametrize("name", ["slurm_a100", "slurm_a6000"])
def test_the_study_files_fit_the_full_grid(name: str) -> None:
    grid, cluster = grid_config("full"), cluster_config(name)
    models = grid_models(grid)
    facts = WorkFacts({m: GEMMA_12B_BYTES for m in models})  # every model as big as the biggest
    fit = allocation_fit.check(grid, cluster, models, executors.allocation(grid, cluster), facts)
    assert fit.problems == ()
    actors = min(grid.workers, cluster.gpus_per_node)
    need = grid.ray.object_store_mb / 1024 + actors * GEMMA_12B_BYTES / GIB + HEADROOM_BASE_GIB + \
        HEADROOM_PER_ACTOR_GIB * actors
    assert round(need, 1) == 205.8 and cluster.mem_gb >= need  # the arithmetic the file's comments show
    assert cluster.cpus_per_task >= actors + grid.score_workers == 12
    assert grid.cluster == "slurm_a100" and not cluster.rehearsal


def test_the_test_cluster_file_refuses_the_study_in_one_message(capsys: pytest.CaptureFixture[str]) -> None:
    from workflows import full_grid

    code = full_grid.main(["cluster=slurm_test", "grid=full", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1, err
    assert "cluster 'slurm_test' gives no GPU" in err and "llada-8b" in err
    assert "cluster 'slurm_test': mem_gb=10 but a node needs" in err


def test_a_local_machines_gpus_found_not_declared_cap_workers_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's main command on a one-GPU workstation still runs (the driver caps workers=2 to 1 with a
    warning); declaring the GPU (ray.num_gpus=1) makes workers=2 a refusal; hub models see the found GPU."""
    monkeypatch.setattr(local_kind, "local_gpu_count", lambda: 1)
    grid, local = grid_config("local"), cluster_config("local")
    shape = executors.allocation(grid, local)
    assert (shape.gpus_per_node, shape.declared, shape.actors_per_node) == (1, 0, 1)
    assert allocation_fit.check(grid, local, grid_models(grid), shape).problems == ()
    declared = dataclasses.replace(grid, ray=dataclasses.replace(grid.ray, num_gpus=1))
    (line,) = allocation_fit.check(declared, local, grid_models(grid), executors.allocation(declared, local)).problems
    assert "set workers=1" in line
    hub = _grid(workers=1, ray=RayConfig(object_store_mb=256))
    assert allocation_fit.check(hub, local, {"big": HUB}, executors.allocation(hub, local)).problems == ()


def test_the_whole_run_must_fit_the_time_limit_times_the_requeues() -> None:
    """On Slurm the run's estimated wall must fit timeout_min × (max_requeues + 1); over it, the problem
    names the max_requeues that would fit: ceil(run / limit) − 1."""
    grid, limit_min, requeues = _grid(), 480, 3
    cluster = _slurm(timeout_min=limit_min, max_requeues=requeues)
    budget_s = limit_min * 60.0 * (requeues + 1)  # 32 h
    assert _problems(grid, cluster, facts=WorkFacts({}, {}, run_seconds=budget_s)) == ()
    run_s = 487 * 3600.0  # the study's wall before sharing
    (line,) = _problems(grid, cluster, facts=WorkFacts({}, {}, run_seconds=run_s))
    assert "the whole run" in line and f"= {budget_s / 3600:,.1f} h" in line
    assert f"set max_requeues={math.ceil(run_s / (limit_min * 60.0)) - 1}" in line
    local = ClusterConfig(name="l", executor="local")  # no job time limit on a local run
    grid_gpu = dataclasses.replace(grid, ray=RayConfig(object_store_mb=1024, num_gpus=8))
    assert _problems(grid_gpu, local, facts=WorkFacts({}, {}, run_seconds=run_s)) == ()
