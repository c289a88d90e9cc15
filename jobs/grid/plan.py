"""Validate a grid up front and turn it into shards of ready-to-decode examples.

Everything that can be checked before a model actor starts is checked here, and every problem is
collected into ONE :class:`~streamgen.config.ConfigError`: unknown models and benchmarks, τ outside
[0, 1], a missing data directory (``streamgen.config.validate_grid``), model weights that cannot be
found (package, file or folder missing; family module absent), hub and local checkpoints that are not
cached, do not build, do not fit their weights or disagree on EOS / mask ids (``jobs.grid.checkpoint_preflight``, which
also pins each hub model to its snapshot commit and refuses a results directory of another snapshot), an
allocation that does not fit the work (``jobs.grid.allocation_fit``, when the cluster is given), benchmarks whose
module or data does not load or cannot score (``Benchmark.problems()``), data files that differ from
their manifest.
Each benchmark's version gets its data files' sha256 prefixes (``data_manifest.versioned``), so a
changed data file changes the shard ids. Models are not loaded in the driver (slow, and a GPU driver
must not touch CUDA before its actors start); the check is that their weights are where the config says.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from jobs.grid import allocation_fit
from jobs.grid.checkpoint_preflight import preflight, recorded_snapshots, snapshot_conflicts
from jobs.grid.shard_tasks import ExampleTask, ShardTask
from jobs.grid.shards import Shard, expand_cells, expand_shards
from streamgen.config import (
    GRANULARITIES,
    BenchmarkConfig,
    ClusterConfig,
    ConfigError,
    GridConfig,
    ModelConfig,
    cluster_config,
    grid_benchmark_config,
    model_config,
    raise_if_problems,
    resolve_data_dir,
    unused_overrides,
    validate_grid,
)
from streamgen.requests.segment import Segmenter
from streamgen.results.cells import effective_system_prompt
from streamgen.timing.granularity import make_segmenter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GridPlan:
    """A validated grid: its configs, examples and shards, and the resolved config as YAML."""

    grid: GridConfig
    data_dir: Path
    models: Mapping[str, ModelConfig]
    benchmarks: Mapping[str, BenchmarkConfig]
    examples: Mapping[str, Mapping[str, Any]]  # benchmark → example id → Example
    segments: Mapping[tuple[str, str], tuple[str, ...]]  # (benchmark, example id) → segments
    excluded: Mapping[tuple[str, str], str | None]  # (benchmark, example id) → reason decided up front
    shards: tuple[Shard, ...]
    snapshots: Mapping[str, str | None] = dataclasses.field(default_factory=dict)  # model → hub commit (pre-flight)
    resource_notes: tuple[str, ...] = ()  # resource checks skipped for want of a fact (jobs.grid.allocation_fit)

    @property
    def resolved_yaml(self) -> str:
        doc = {
            "grid": dataclasses.asdict(self.grid),
            "data_dir": str(self.data_dir),
            "models": {k: dataclasses.asdict(v) for k, v in self.models.items()},
            "benchmarks": {k: dataclasses.asdict(v) for k, v in self.benchmarks.items()},
        }
        return OmegaConf.to_yaml(OmegaConf.create(doc))

    def task(self, shard: Shard, run_id: str, code_version: str) -> ShardTask:
        """The shard ready to run: each example with its request (system prompts composed), run order,
        segment count and up-front exclusion. Built once; the actor and the CPU worker both take it."""
        from streamgen.stream import StreamRequest
        from streamgen.timing.corrections import with_corrections

        bench, items = shard.cell.benchmark.name, []
        for example_id, base_first in zip(shard.example_ids, shard.base_first, strict=True):
            ex, segs, reason = (self.examples[bench][example_id], self.segments[(bench, example_id)],
                                self.excluded[(bench, example_id)])
            request = None if reason else with_corrections(StreamRequest(
                example_id=example_id, history=tuple(ex.history), segments=segs,
                system_prompt=effective_system_prompt(shard.cell.model.system_prompt, ex.system_prompt)),
                shard.cell.corrections)
            items.append(ExampleTask(ex, request, base_first, len(segs), reason))
        return ShardTask(shard, run_id, code_version, tuple(items), self.grid.share_work)


def cell_problems(grid: GridConfig, models: dict[str, ModelConfig], benches: dict[str, BenchmarkConfig]) -> list[str]:
    """What would stop a model decoding a (benchmark, answer budget) cell: its family's own check (e.g.
    a diffusion buffer the official sampler cannot cut into blocks of that length)."""
    from streamgen.families.registry import CELL_CHECKS  # the families' checks, without torch

    p: list[str] = []
    for cfg in models.values():
        check = CELL_CHECKS.get(cfg.family)
        for name, bench in benches.items():
            budget = grid.max_new_tokens if grid.max_new_tokens is not None else bench.max_new_tokens
            if check is not None:
                p.extend(x for x in check(cfg, int(budget), name) if x not in p)
    return p


def model_problems(cfg: ModelConfig) -> list[str]:
    """Whether ``cfg``'s weights are where it says (nothing is loaded; ``validate_model`` checks the family
    against ``streamgen.config.FAMILIES``, the names ``streamgen.families.registry.FAMILIES`` lists)."""
    from streamgen.models import weights

    p: list[str] = []
    try:
        if cfg.source == "smollm2":
            weights.smollm2_gguf_path()
        elif cfg.source == "gguf":
            path = Path(cfg.path) / cfg.gguf_file if cfg.gguf_file else Path(cfg.path)
            if not path.is_file():
                p.append(f"model {cfg.name}: GGUF file {path} does not exist; fix path=")
    except ConfigError as exc:
        p.extend(exc.problems)
    return p


def _load_examples(cfg: BenchmarkConfig, data_dir: Path, limit: int | None,
                   segmenter: Segmenter | None = None,
                   ids: Sequence[str] = ()) -> tuple[dict, dict, list[str], BenchmarkConfig]:
    """The benchmark's examples by id (:func:`pick_examples`), their segments, what would stop it
    from scoring (e.g. a missing DS-1000 interpreter: the examples still load, the dry run still
    estimates) and its config as the loaded benchmark defines it (an lm-eval task fills in its version,
    metric and answer budget); raises ConfigError naming what stops them loading (e.g. an id its data
    does not have)."""
    from streamgen.benchmarks import load_benchmark

    bench = load_benchmark(cfg)
    cannot_score = list(bench.problems())
    examples = pick_examples(cfg.name, bench.examples(data_dir, None), limit, ids, data_dir) if ids \
        else bench.examples(data_dir, limit)
    by_id = {ex.example_id: ex for ex in examples}
    if len(by_id) != len(examples):
        raise ConfigError([f"benchmark {cfg.name}: duplicate example ids in its data"])
    segments = {(cfg.name, ex.example_id): tuple(bench.segments(ex)) for ex in examples}
    if segmenter is not None:  # another granularity: re-cut the benchmark's (lossless) segments
        segments = {key: tuple(segmenter("".join(segs))) for key, segs in segments.items()}
    return by_id, segments, cannot_score, bench.cfg


def pick_examples(name: str, examples: list[Any], limit: int | None, ids: Sequence[str], data_dir: Path) -> list[Any]:
    """The listed ``ids`` first, then the data's first other examples, ``limit`` in all (None: every
    example), returned in the data's order: ``limit=5`` with two ids listed runs them and three more."""
    wanted, known = [str(i) for i in ids], [ex.example_id for ex in examples]
    if missing := sorted(set(wanted) - set(known)):
        raise ConfigError([f"benchmark {name}: examples {missing} are not in its data under {data_dir}; "
                           f"fix examples.{name} in the grid (its ids look like {known[:2]})"])
    order = [i for i in known if i in set(wanted)] + [i for i in known if i not in set(wanted)]
    keep = set(order if limit is None else order[:limit])
    return [ex for ex in examples if ex.example_id in keep]


def _segmenter(grid: GridConfig) -> Segmenter | None:
    """The grid's segmenter when it is not the benchmarks' own sentences."""
    if grid.granularity == "sentence" or grid.granularity not in GRANULARITIES:
        return None  # an unknown one is already a validate_grid problem
    return make_segmenter(grid.granularity, grid.segment_chars)


def plan_grid(grid: GridConfig, cluster: ClusterConfig | None = None, shape: allocation_fit.Shape | None = None,
              facts: allocation_fit.WorkFacts | None = None) -> GridPlan:
    """Validate ``grid`` and everything it names; expand it into shards. Raises one ConfigError.

    With ``cluster`` and the ``shape`` of its Ray (``jobs.cluster.executors.allocation``), the allocation is
    checked against the work too (:mod:`jobs.grid.allocation_fit`; ``facts`` default: what is known without an
    estimate); its problems are in the same ConfigError.
    """
    plan, problems = plan_with_problems(grid, cluster, shape, facts)
    raise_if_problems(problems, f"grid {grid.name!r} cannot run")
    assert plan is not None
    return plan


def plan_with_problems(grid: GridConfig, cluster: ClusterConfig | None = None, shape: allocation_fit.Shape | None = None,
                       facts: allocation_fit.WorkFacts | None = None) -> tuple[GridPlan | None, list[str]]:
    """The plan and every problem found. The plan is built whenever only the environment fails — the
    checkpoints' pre-flight (not cached, snapshots that conflict), a benchmark's scorer (the DS-1000
    interpreter) or the allocation against the work (:mod:`jobs.grid.allocation_fit`): ``--dry-run`` still shows
    the plan and its estimate before it exits on them; any other problem leaves no plan (None)."""
    from streamgen.benchmarks.data_manifest import versioned

    problems = validate_grid(grid)
    data_dir = resolve_data_dir(grid.data_dir)
    if unused := unused_overrides(grid):
        log.info("ignoring benchmark_overrides for %s: not in benchmarks=%s", unused, list(grid.benchmarks))
    models: dict[str, ModelConfig] = {}
    benches: dict[str, BenchmarkConfig] = {}
    for name in grid.models:
        try:
            models[name] = model_config(name)
        except ConfigError:
            continue  # already reported by validate_grid
        problems.extend(model_problems(models[name]))
    checked = preflight(models)  # hub / local checkpoints: cached, fit, ids; pinned to their snapshot commits
    models = checked.models
    late = checked.problems + snapshot_conflicts(recorded_snapshots(grid.results_dir), checked.snapshots,
                                                 grid.results_dir)
    fit = allocation_fit.ResourceCheck((), ())
    if cluster is not None and shape is not None and not problems:  # sizing an invalid grid has no meaning
        fit = allocation_fit.check(grid, cluster, models, shape, facts)
    late.extend(fit.problems)
    for note in fit.notes:
        log.info("resources: %s", note)
    for name in grid.benchmarks:
        try:
            benches[name] = grid_benchmark_config(grid, name)
        except ConfigError:
            continue
    examples: dict[str, dict[str, Any]] = {}
    segments: dict[tuple[str, str], tuple[str, ...]] = {}
    if data_dir.is_dir():
        for name, cfg in benches.items():
            try:
                examples[name], segs, cannot_score, loaded = _load_examples(
                    cfg, data_dir, grid.limit, _segmenter(grid), grid.examples.get(name, ()))
                late.extend(p for p in cannot_score if p not in late)
                segments.update(segs)
                benches[name] = versioned(loaded, data_dir)  # the data files' sha256 enter cells and rows
            except ConfigError as exc:
                problems.extend(p for p in exc.problems if p not in problems)
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                problems.append(f"benchmark {name}: cannot load its examples from {data_dir} "
                                f"({type(exc).__name__}: {exc})")
    problems.extend(cell_problems(grid, models, benches))
    if problems:
        return None, problems + late
    try:
        plan = _expand(grid, data_dir, models, benches, examples, segments, checked.snapshots, fit.notes)
    except ConfigError as exc:
        return None, exc.problems + late
    return plan, late


def _expand(grid: GridConfig, data_dir: Path, models: dict[str, ModelConfig], benches: dict[str, BenchmarkConfig],
            examples: dict[str, dict[str, Any]], segments: dict[tuple[str, str], tuple[str, ...]],
            snapshots: Mapping[str, str | None], notes: tuple[str, ...] = ()) -> GridPlan:
    """Cells and shards of a validated grid (``shard_size: auto``: sized by the estimate)."""
    from streamgen.benchmarks import exclusion_reason

    excluded = {(b, e): exclusion_reason(examples[b][e], segs) for (b, e), segs in segments.items()}
    cells = expand_cells(grid, models, benches)
    ids = {name: list(exs) for name, exs in examples.items()}
    size: int | dict[str, int] = grid.shard_size
    if grid.shard_size == "auto":
        size = _auto_sizes(grid, models, cells, examples, segments, excluded)
    shards = expand_shards(cells, ids, shard_size=size, seed=grid.seed)
    log.info("grid %s: %d cells, %d shards, %d examples per cell at most",
             grid.name, len(cells), len(shards), max((len(v) for v in ids.values()), default=0))
    return GridPlan(grid, data_dir, models, benches, examples, segments, excluded, tuple(shards), dict(snapshots),
                    tuple(notes))


def _auto_sizes(grid: GridConfig, models: dict[str, ModelConfig], cells: list, examples: dict,
                segments: dict, excluded: dict) -> dict[str, int]:
    from jobs.grid.gpu_hours import grid_device, require_sizes
    from jobs.grid.unit_sizing import auto_shard_sizes

    cluster = cluster_config(grid.cluster)
    require_sizes(models)
    return auto_shard_sizes(cells, examples, segments, excluded, cluster=cluster, device=grid_device(grid, cluster))
