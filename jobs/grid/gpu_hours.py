"""The GPU-hour estimate of a grid, from first principles: forwards × roofline seconds, per work unit.

For every work unit the driver would run (``jobs.grid.units.group_shards``: one (model, benchmark,
verifier mode, example chunk) across its acceptance cells) and every example in it that is not excluded
up front, the family's forward rule (``streamgen.sizing.forward_counts``) gives each decode's forwards and
tokens, and ``streamgen.sizing.devices.forward_seconds`` each forward's time on the grid's device:

- the **shared work** — the base run over the complete request and stream step 1 (no draft) — once per
  unit and example, not once per cell (``jobs/grid/units.py``);
- stream steps 2..n once per cell, each verifying a draft of the assumed answer length and keeping
  nothing (the estimate cannot know what will be kept: an upper bound; for LLaDA / Dream it is exact
  unless a kept run covers a whole block);
- prompt tokens of prefix k: its characters (history, system prompts, segments 1..k) / ``CHARS_PER_TOKEN``
  + ``TEMPLATE_TOKENS``;
- answer length (autoregressive, ReFusion, DiffusionGemma; LLaDA / Dream fill their buffer anyway): the
  mean base answer of earlier rows of that (model, benchmark) when given (``answer_lengths``), else
  ``ANSWER_FRACTION`` × the answer budget (automatic shard sizes never use rows: shard ids must not
  depend on what has run).

GPU-hours = Σ unit seconds / 3600 (one GPU per model actor). Wall time on the allocation: the units
spread over ``workers`` actors (capped at nodes × GPUs), any actor serving any model, perfectly packed:
max(Σ / workers, the longest unit); model loading, Ray start and scoring are not counted (docs/estimate.md).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from jobs.grid.shards import Shard
from jobs.grid.units import group_shards
from streamgen.config import ClusterConfig, ConfigError, GridConfig, ModelConfig, cluster_config
from streamgen.sizing.calibration import Fit
from streamgen.sizing.cpu_share import shared_decode_seconds
from streamgen.sizing.devices import DEVICES, Device, device_from_file, forward_seconds
from streamgen.sizing.forward_counts import Decode, Forwards, decode_rule, total_forwards
from streamgen.sizing.parameters import ModelSize, model_size

__all__ = ["ANSWER_FRACTION", "CHARS_PER_TOKEN", "Estimate", "ExampleCost", "WarmupLine", "estimate_plan",
           "example_cost", "grid_device", "model_parameters", "unit_seconds", "warmup_lines", "workers_on"]

CHARS_PER_TOKEN = 4.0  # assumption: English prose and code average about 4 characters per BPE token
TEMPLATE_TOKENS = 16  # assumption: chat-template tokens around the request
ANSWER_FRACTION = 0.5  # assumption: an answer without earlier rows fills half its budget

from streamgen.sizing.parameters import model_parameters  # noqa: E402  (re-exported: the cluster checks call it here)


class PlanLike(Protocol):
    """What the estimate reads of a ``jobs.grid.plan.GridPlan`` (a Protocol: this module cannot import it)."""

    @property
    def grid(self) -> GridConfig: ...
    @property
    def models(self) -> Mapping[str, ModelConfig]: ...
    @property
    def examples(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def segments(self) -> Mapping[tuple[str, str], tuple[str, ...]]: ...
    @property
    def excluded(self) -> Mapping[tuple[str, str], str | None]: ...
    @property
    def shards(self) -> tuple[Shard, ...]: ...


@dataclass(frozen=True)
class ExampleCost:
    """One example's work inside one unit: forwards and seconds, the shared part once."""

    forwards: int
    seconds: float
    shared_forwards: int  # base run + step 1, counted once for the unit's ``cells``
    per_cell_forwards: int  # steps 2..n, counted for each cell


@dataclass(frozen=True)
class Line:
    """Per (model, benchmark): examples, units, forwards, GPU-hours and the longest unit."""

    model: str
    benchmark: str
    examples: int
    units: int
    forwards: int
    gpu_hours: float
    max_unit_s: float


@dataclass(frozen=True)
class WarmupLine:
    """The untimed warm-up pair (``streamgen.warmup``) of one model: once per actor that loads it."""

    model: str
    actors: int  # actors that will load the model: min(workers, its units)
    forwards: int  # one actor's warm-up pair
    seconds: float  # one actor's warm-up pair
    benchmark: str  # the cell priced (the model's costliest: an actor warms up on whichever unit it starts with)

    @property
    def gpu_hours(self) -> float:
        return self.actors * self.seconds / 3600


@dataclass(frozen=True)
class Estimate:
    device: Device
    lines: tuple[Line, ...]
    unit_s: Mapping[str, float]  # work unit key (its first shard id) → seconds
    workers: int
    unknown: tuple[str, ...]  # models with no parameter count: not estimated
    warmups: tuple[WarmupLine, ...] = ()
    cpu_share: float = 1.0  # on a CPU device: decode seconds with the run's company / alone (streamgen.sizing.cpu_share)
    company_s: float = 0.0  # the company's CPU-seconds that factor priced (0: none)
    cores: int = 1  # the cores the decoders and the company shared (where company_s > 0)

    @property
    def gpu_hours(self) -> float:
        """Decoding: the work units' GPU-hours (what rows measure; the warm-up is outside every unit)."""
        return sum(x.gpu_hours for x in self.lines)

    @property
    def warmup_hours(self) -> float:
        return sum(x.gpu_hours for x in self.warmups)

    @property
    def total_hours(self) -> float:
        """Decoding and the actors' warm-up pairs: what the allocation spends on forwards."""
        return self.gpu_hours + self.warmup_hours

    @property
    def wall_h(self) -> float:
        longest = max(self.unit_s.values(), default=0.0)
        return max(sum(self.unit_s.values()) / max(self.workers, 1), longest) / 3600


def grid_device(grid: GridConfig, cluster: ClusterConfig | None = None) -> Device:
    """The device the grid's cluster declares (null: ``cpu``); ``$STREAMGEN_DEVICE_FILE`` (written by
    ``bench/bench_machine.py --out``) replaces the table's ``cpu`` row."""
    name = (cluster or cluster_config(grid.cluster)).device or "cpu"
    path = os.environ.get("STREAMGEN_DEVICE_FILE")
    if name == "cpu" and path:
        return device_from_file(path)
    return DEVICES[name]


def workers_on(grid: GridConfig, cluster: ClusterConfig) -> int:
    """Model actors the run will have: ``workers``, capped at nodes × GPUs on a GPU cluster (the driver's cap)."""
    gpus = cluster.nodes * cluster.gpus_per_node
    return min(grid.workers, gpus) if gpus > 0 else grid.workers


def prompt_tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN) + TEMPLATE_TOKENS


def _prefix_chars(example: Any, segments: Sequence[str], model: ModelConfig) -> list[int]:
    fixed = sum(len(str(m.get("content", ""))) for m in example.history) + len(example.system_prompt or "") \
        + len(model.system_prompt or "")
    out, typed = [], 0
    for seg in segments:
        typed += len(seg)
        out.append(fixed + typed)
    return out


def _seconds(work: Sequence[Forwards], size: ModelSize, device: Device, dtype: str, fit: Fit | None = None) -> float:
    """Seconds of ``work``: the measured fit's where the model is calibrated, else the roofline's."""
    if fit is not None:
        return sum(f.count * fit.seconds(f.tokens) for f in work if f.count)
    return sum(f.count * forward_seconds(device, params=size.parameters, tokens=f.tokens, layers=size.layers,
                                         dtype=dtype, active=size.active, experts=size.experts, top_k=size.top_k)
               for f in work if f.count)


def example_cost(model: ModelConfig, benchmark: str, budget: int, example: Any, segments: Sequence[str],
                 cells: int, device: Device, size: ModelSize, answer_tokens: float | None = None,
                 kept: Sequence[float] | None = None, *, modes: Sequence[str | None] | None = None,
                 share: bool = True, forked: bool = False, fit: Fit | None = None) -> ExampleCost:
    """One example's forwards and seconds in a unit of ``cells`` cells, each distinct computation once.

    ``kept``: per cell, the share of each later stream step's draft that is kept (its leading run, rounded
    down); default nothing, the bound. ``modes``: per cell, its verifier mode (a LLaDA/Dream unit holds
    both). With ``share`` (``share_work``), the base run and step 1 count once, a later step once per
    distinct path (cells of one mode and one kept share follow one path; ``forked``: every cell its own,
    the stated worst case of cells that keep different runs), and a LLaDA/Dream step that keeps nothing
    pays its verify forward and, once per request prefix, the base decode of that prefix (the last
    prefix's is the base run). Without ``share`` every cell pays everything. ``per_cell_forwards``: the
    first path's steps 2..n. ``fit``: the model's calibration (``streamgen.sizing.calibration``): its
    measured seconds per forward replace the roofline's."""
    rule = decode_rule(model, benchmark, budget)
    answer = max(1, round(answer_tokens if answer_tokens is not None else ANSWER_FRACTION * budget))
    prompts = [prompt_tokens(c) for c in _prefix_chars(example, segments, model)]
    shared = [*rule(Decode(prompts[-1], answer)), *rule(Decode(prompts[0], answer))]
    shares = list(kept) if kept is not None else [0.0] * cells
    if len(shares) != cells or not all(0.0 <= x <= 1.0 for x in shares):
        raise ValueError(f"kept={shares}: need one share in [0, 1] per cell ({cells})")
    keys = list(zip(modes or [None] * cells, shares, range(cells) if forked or not share else [0] * cells, strict=True))
    paths = list(dict.fromkeys(keys))
    memo = share and model.family == "bidirectional"
    decoded = {len(prompts) - 1}  # prefixes whose base decode ran: the complete request's, by the base run
    work: dict[tuple[Any, ...], list[Forwards]] = {}
    for path in paths:
        accepted, work[path] = math.floor(path[1] * answer), []
        for k in range(1, len(prompts)):
            step = rule(Decode(prompts[k], answer, draft=answer, accepted=accepted, fed=prompts[k] - prompts[k - 1] + answer))
            if memo and accepted == 0 and len(step) == 2:  # verify + the base decode of prefix k
                step = step[:1] if k in decoded else step
                decoded.add(k)
            work[path] += step
    once = 1 if share else cells
    per_path = {p: (total_forwards(w), _seconds(w, size, device, model.dtype, fit)) for p, w in work.items()}
    return ExampleCost(once * total_forwards(shared) + sum(f for f, _ in per_path.values()),
                       once * _seconds(shared, size, device, model.dtype, fit) + sum(t for _, t in per_path.values()),
                       total_forwards(shared), per_path[paths[0]][0])


def unit_seconds(plan: PlanLike, device: Device, *, answer_lengths: Mapping[tuple[str, str], float] | None = None
                 ) -> dict[str, float]:
    """Estimated seconds of every work unit of ``plan`` on ``device``, under the id of each of the unit's
    shards (a resumed run's unit may start at any of them). A unit of a model whose size is unknown is
    left out (``estimate_plan`` names those models)."""
    return {s.shard_id: v[0] for v in _units(plan, device, answer_lengths or {}).values() for s in v[2]}


def _units(plan: PlanLike, device: Device, answers: Mapping[tuple[str, str], float],
           kept: Callable[[Any], float] | None = None, *, share: bool | None = None,
           forked: bool = False, calibration: Mapping[str, Fit] | None = None,
           factors: Mapping[tuple[str, str], float] | None = None,
           time_factors: Mapping[str, float] | None = None
           ) -> dict[str, tuple[float, int, tuple[Shard, ...], int]]:
    """Per unit (by its first shard id): seconds, forwards, its shards, examples decoded."""
    fits, factor_of, timed = calibration or {}, factors or {}, time_factors or {}
    sizes = {name: model_size(cfg) for name, cfg in plan.models.items()}
    out: dict[str, tuple[float, int, tuple[Shard, ...], int]] = {}
    for unit in group_shards(plan.shards, share=plan.grid.share_work):
        first = unit[0]
        cell, bench = first.cell, first.cell.benchmark.name
        size = sizes.get(first.model_name)
        if size is None:
            continue
        seconds, forwards, n = 0.0, 0, 0
        factor = factor_of.get((first.model_name, bench), 1.0)
        for example_id in first.example_ids:
            if plan.excluded[(bench, example_id)]:
                continue
            cost = example_cost(cell.model, bench, cell.max_new_tokens, plan.examples[bench][example_id],
                                plan.segments[(bench, example_id)], len(unit), device, size,
                                answers.get((cell.model.row_model, bench)),
                                [kept(s.cell) for s in unit] if kept is not None else None,
                                modes=[s.cell.verifier_mode for s in unit],
                                share=plan.grid.share_work if share is None else share, forked=forked,
                                fit=fits.get(first.model_name))
            seconds, forwards, n = seconds + cost.seconds, forwards + cost.forwards, n + 1
        out[first.shard_id] = (seconds * factor * timed.get(first.model_name, 1.0), round(forwards * factor), unit, n)
    return out


def estimate_plan(plan: PlanLike, device: Device, *, workers: int,
                  answer_lengths: Mapping[tuple[str, str], float] | None = None,
                  kept: Callable[[Any], float] | None = None, share: bool | None = None,
                  forked: bool = False, calibration: Mapping[str, Fit] | None = None,
                  factors: Mapping[tuple[str, str], float] | None = None,
                  time_factors: Mapping[str, float] | None = None, company_s: float = 0.0,
                  cores: int = 1, company_processes: int = 1) -> Estimate:
    """The plan's estimate per (model, benchmark) and in total on ``workers`` actors of ``device``.

    ``kept``: a cell → the share of each later stream step's draft kept (default nothing: the bound
    the dry run prints; ``bench/bench_estimate_refill.py`` sets it to read what keeping saves).
    ``share``: count shared work once (default the grid's ``share_work``; False: every cell alone);
    ``forked``: every cell on a path of its own from step 2 (cells that keep different runs).
    ``calibration``: model name → measured fit (``--calibrate``); those models' seconds are measured ones.
    ``factors``: (model name, benchmark) → forwards executed per forward of the rules, from the pilot
    (``jobs.run.pilot``): every unit's forwards and seconds of that pair are scaled by it. ``time_factors``: model
    name → the pilot's measured decoding over the fit's seconds for it: that model's seconds are scaled by it.
    ``company_s``: on a CPU device, the CPU-seconds of the run's other work beside its decoders (the pilot's
    scoring, scaled to the run, and the scorers' starts: ``jobs.run.pilot.Pilot.company_s``), sharing ``cores``
    cores with the ``workers`` decoders, done by ``company_processes`` processes (the scorers): every unit's seconds are scaled by what that sharing costs
    (``streamgen.sizing.cpu_share``; ``Estimate.cpu_share``). Leave it 0 on a GPU: there it slows no forward."""
    units = _units(plan, device, answer_lengths or {}, kept, share=share, forked=forked, calibration=calibration,
                   factors=factors, time_factors=time_factors)
    share_factor = 1.0
    if company_s > 0:
        alone = sum(v[0] for v in units.values())
        share_factor = shared_decode_seconds(alone, company_s, workers, cores, company_processes) / alone if alone > 0 else 1.0
        units = {k: (v[0] * share_factor, *v[1:]) for k, v in units.items()}
    acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    for seconds, forwards, unit, _ in units.values():
        key = (unit[0].model_name, unit[0].cell.benchmark.name)
        ids[key].update(unit[0].example_ids)
        a = acc[key]
        a[0], a[1], a[2], a[3] = a[0] + 1, a[1] + forwards, a[2] + seconds, max(a[3], seconds)
    lines = tuple(Line(m, b, len(ids[(m, b)]), int(a[0]), int(a[1]), a[2] / 3600, a[3]) for (m, b), a in acc.items())
    unknown = tuple(sorted(name for name, cfg in plan.models.items() if model_size(cfg) is None))
    warm = warmup_lines(plan, device, workers, [v[2] for v in units.values()], calibration) if plan.grid.warm_up else ()
    return Estimate(device, lines, {k: v[0] for k, v in units.items()}, workers, unknown, warm, share_factor,
                    max(company_s, 0.0), max(1, cores))


def warmup_lines(plan: PlanLike, device: Device, workers: int, units: Sequence[Sequence[Shard]],
                 calibration: Mapping[str, Fit] | None = None) -> tuple[WarmupLine, ...]:
    """Per model: the warm-up pair every actor that loads it runs (``jobs.run.actors.ModelActor._warm_up``:
    ``streamgen.warmup.WARMUP_REQUEST``, greedy, base run then stream, nothing shared), priced on the
    model's costliest (benchmark, budget) cell, times the actors that load the model: at most
    one per worker, at most one per unit (the scheduler keeps an actor on its model while it has units)."""
    from streamgen.warmup import WARMUP_REQUEST

    per_model: dict[str, list[Shard]] = defaultdict(list)
    for unit in units:
        per_model[unit[0].model_name].append(unit[0])
    out = []
    for name, firsts in per_model.items():
        size = model_size(plan.models[name])
        if size is None:
            continue
        best: tuple[float, int, str] = (-1.0, 0, "")
        for cell in {(s.cell.benchmark.name, s.cell.max_new_tokens): s.cell for s in firsts}.values():
            cost = example_cost(cell.model, cell.benchmark.name, cell.max_new_tokens, WARMUP_REQUEST,
                                WARMUP_REQUEST.segments, 1, device, size, share=False,
                                fit=(calibration or {}).get(name))
            best = max(best, (cost.seconds, cost.forwards, cell.benchmark.name))
        out.append(WarmupLine(name, min(max(workers, 1), len(firsts)), best[1], best[0], best[2]))
    return tuple(out)


def require_sizes(models: Mapping[str, ModelConfig]) -> None:
    """ConfigError naming every model the estimate has no size for (automatic shard sizes need them all)."""
    missing = [f"model {n}: shard_size=auto needs its parameter count: no config.json is cached; set "
               f"`parameters:` (and `layers:`) in configs/models/{n}.yaml from its model card"
               for n, cfg in models.items() if model_size(cfg) is None]
    if missing:
        raise ConfigError(missing, "cannot size work units")
