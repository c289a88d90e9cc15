"""The plan of a grid without running it (``--dry-run``): validate, count, estimate; start nothing.

``dry_run_report(grid)`` validates the grid exactly as a run does (``jobs.grid.plan.plan_with_problems``:
configs, weights where they say, benchmark data and scorers, the checkpoints' pre-flight) plus the
cluster config (without contacting Slurm), then prints per cell the examples (and how many are
excluded up front), the shards and the shards already complete in ``results_dir``, and the GPU-hour
estimate from first principles (``jobs.grid.gpu_hours``): GPU-hours per (model, benchmark), in total, and the
wall time on the allocation, with its assumptions. The allocation is then checked against the work
with the estimate's facts (``jobs.grid.allocation_fit``: model bytes, each unit's seconds). When only the
environment failed (checkpoints not cached, the allocation too small), the plan and the estimate are
still printed; the problems come back for the caller to raise.

Earlier rows add one thing: where ``results_dir`` holds included rows of a (model, benchmark), their
mean base answer length replaces the assumed one (the answer length of autoregressive, ReFusion and
DiffusionGemma decodes is the model's to choose). No Ray, no model load (tiny models are built to be
counted).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.grid import allocation_fit
from jobs.grid.allocation_fit import WorkFacts, known_facts
from jobs.grid.gpu_hours import (
    ANSWER_FRACTION,
    CHARS_PER_TOKEN,
    TEMPLATE_TOKENS,
    Estimate,
    estimate_plan,
    grid_device,
    workers_on,
)
from jobs.grid.plan import GridPlan, plan_with_problems
from jobs.grid.unit_sizing import UNIT_FRACTION, target_unit_s
from jobs.run.pilot import Pilot
from jobs.run.writer import ResultWriter
from streamgen.config import ClusterConfig, ConfigError, GridConfig, cluster_config, raise_if_problems
from streamgen.results.result_files import readable_files
from streamgen.sizing.parameters import model_parameters, model_size

log = logging.getLogger(__name__)

_COLUMNS = ("model", "benchmark", "base_answer_tokens", "cell_settings", "excluded_reason", "error_type")


def answer_lengths(results_dir: Path) -> dict[tuple[str, str], float]:
    """Mean base answer tokens per (model, benchmark) over the included rows under ``results_dir``
    (merged files and per-shard files alike; three columns read, summed per file)."""
    sums: defaultdict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for path in readable_files(results_dir, "pairs").files:  # foreign files skipped with a warning each
        for row in _file_sums(path):
            acc = sums[(row["model"], row["benchmark"])]
            acc[0], acc[1] = acc[0] + row["base_answer_tokens_sum"], acc[1] + row["base_answer_tokens_count"]
    return {k: v[0] / v[1] for k, v in sums.items() if v[1]}


def _file_sums(path: Path) -> list[dict]:
    """Per (model, benchmark): the sum and count of base answer tokens of one file's included rows."""
    file = pq.ParquetFile(path)  # one open: its footer gives the names, then three columns are read
    names = file.schema_arrow.names
    if "cell_settings" not in names:
        return []
    table = file.read(columns=[c for c in _COLUMNS if c in names])
    keep = pc.is_valid(table["base_answer_tokens"])
    for name in ("cell_settings", "excluded_reason", "error_type"):  # a row counts if these are empty
        if name not in table.column_names:
            continue
        filled = pc.and_kleene(pc.is_valid(table[name]), pc.not_equal(table[name], ""))  # null: not filled
        keep = pc.and_kleene(keep, filled if name == "cell_settings" else pc.invert(filled))
    kept = table.filter(pc.fill_null(keep, False))
    return kept.group_by(["model", "benchmark"]).aggregate(
        [("base_answer_tokens", "sum"), ("base_answer_tokens", "count")]).to_pylist()


@dataclass(frozen=True)
class CellLine:
    label: str
    examples: int
    excluded: int
    shards: int
    shards_done: int


def _cell_lines(plan: GridPlan, results_dir: Path) -> list[CellLine]:
    writer = ResultWriter(results_dir)
    # no pairs folder, no finished shard: skip hashing every shard's path (the full grid has ~120k)
    any_done = (Path(results_dir) / "pairs").is_dir()
    by_cell: dict[str, list] = defaultdict(list)
    for shard in plan.shards:
        by_cell[shard.cell.cell_id].append(shard)
    lines = []
    for shards in by_cell.values():
        bench = shards[0].cell.benchmark.name
        lines.append(CellLine(
            shards[0].cell.label, sum(len(s) for s in shards),
            sum(plan.excluded[(bench, e)] is not None for s in shards for e in s.example_ids),
            len(shards), sum(writer.is_complete(s) for s in shards) if any_done else 0))
    return lines


def dry_run_report(grid: GridConfig, *, results_dir: str | Path | None = None,
                   fit_on: str | Path | None = None, calibrate: str | Path | None = None,
                   pilot: int = 1) -> tuple[str, list[str]]:
    """The plan and its estimate as text, and the problems that would stop a run (the pre-flight's).
    Raises ConfigError when the grid cannot even be planned. Starts nothing and writes nothing, except
    with ``calibrate`` (below).

    ``results_dir``: where complete shards are looked for (default ``grid.results_dir``); ``fit_on``:
    where earlier rows' answer lengths are read (default the same directory). ``calibrate``: a calibration
    file (``--calibrate``; ``streamgen.sizing.calibration``): the grid's models are timed on this machine
    (or their fits read from the file) and the calibrated estimate is printed beside the roofline's;
    ``pilot`` examples of each (model, benchmark) per unit kind are decoded here first (``jobs.run.pilot``;
    0: none) and their answer lengths and forward factors enter the calibrated estimate. The calibration
    and the pilot write their cache files; nothing else is written.
    """
    from jobs.cluster.executors import allocation, validate_cluster

    cluster = cluster_config(grid.cluster)
    raise_if_problems(validate_cluster(cluster), f"cluster {grid.cluster!r}")
    plan, problems = plan_with_problems(grid)
    if plan is None:
        raise ConfigError(problems, f"grid {grid.name!r} cannot run")
    out_dir = Path(results_dir or grid.results_dir)
    answers = answer_lengths(Path(fit_on or out_dir))
    device, workers = grid_device(grid, cluster), workers_on(grid, cluster)
    est = estimate_plan(plan, device, workers=workers, answer_lengths=answers)
    alone = estimate_plan(plan, device, workers=workers, answer_lengths=answers, share=False)
    forked = estimate_plan(plan, device, workers=workers, answer_lengths=answers, kept=lambda _: FORKED_KEPT,
                           forked=True) if grid.share_work else None
    fit = allocation_fit.check(grid, cluster, plan.models, allocation(grid, cluster), work_facts(plan, est))
    problems = [*problems, *fit.problems]
    plan = dataclasses.replace(plan, resource_notes=fit.notes)
    parts = [render(grid, plan, _cell_lines(plan, out_dir), out_dir), "",
             "\n".join([render_estimate(est, grid, cluster, answers, Sharing(alone, forked)), *moe_lines(plan)])]
    if calibrate is not None:
        parts += ["", calibrated_report(plan, est, grid, cluster, answers, Path(calibrate), pilot=pilot)]
    return "\n".join(parts), problems


def moe_lines(plan: GridPlan) -> list[str]:
    """Per mixture-of-experts model: its experts, experts per token and where they came from (its cached
    config.json, else its YAML: ``streamgen.sizing.parameters``)."""
    sizes = {name: model_size(cfg) for name, cfg in plan.models.items()}
    return [f"  - {name}: a mixture of experts, {s.experts} experts, {s.top_k} per token"
            f"{f', {s.active:,} parameters active of {s.parameters:,}' if s.active else ''} (from {s.moe_source})"
            for name, s in sizes.items() if s is not None and s.experts is not None]


def calibration_path(grid: GridConfig, value: str | None) -> Path:
    """``--calibrate`` alone: ``<results_dir>/calibration.json``; ``--calibrate=PATH``: PATH."""
    return Path(value) if value else Path(grid.results_dir) / "calibration.json"


def calibrated_report(plan: GridPlan, est: Estimate, grid: GridConfig, cluster: ClusterConfig,
                      answers: dict[tuple[str, str], float], path: Path, *, pilot: int = 1) -> str:
    """Time the grid's models here (or read their fits from ``path``), run the pilot (``pilot`` examples per
    (model, benchmark) and unit kind; its facts cached beside ``path``) and print the calibrated estimate beside
    the roofline's, per (model, benchmark) and in total. The pilot's answer lengths replace the assumed ones
    (earlier rows, where ``results_dir`` has them, still win), its factors scale the rules' forwards, and its
    measured decoding against the fit's seconds for the same decodes scales each model's seconds (time factor)."""
    from jobs.run.pilot import pilot_path, run_pilots
    from streamgen.sizing.calibration import calibrate_models

    gpus = cluster.nodes * cluster.gpus_per_node
    device = "cuda" if gpus and _cuda() else "cpu"
    # as many at once as the run will have actors sharing this CPU: the workers, at most one per unit
    cal = calibrate_models(plan.models, path, device=device,
                           concurrent=1 if gpus else min(workers_on(grid, cluster), max(len(est.unit_s), 1)))
    foreign = est.device.name != "cpu" and device == "cpu"  # a GPU cluster's dry run on a machine without one
    flown = run_pilots(plan, pilot_path(path), pilot=pilot, device=device,
                       processes=min(workers_on(grid, cluster), 1 if gpus else 64),
                       fits=cal.fits, score=not gpus) if pilot > 0 and not foreign else None
    lengths = {**(flown.answer_lengths if flown else {}), **answers}
    company = run_company(flown, plan, grid, cluster) if flown else 0.0
    measured = estimate_plan(plan, est.device, workers=est.workers, answer_lengths=lengths, calibration=cal.fits,
                             factors=flown.factors if flown else None,
                             time_factors=flown.time_factors if flown else None,
                             company_s=company, cores=run_cores(cluster),
                             company_processes=grid.score_workers)
    why = "skipped: this machine has no GPU (whole decodes of the study's models would take hours here); run " \
          "--calibrate on the allocation" if foreign else "none (--pilot=0)"
    lines = pilot_lines(flown, measured, answers) if flown else [
        f"pilot: {why}: the calibrated estimate keeps the assumed answer lengths and the rules' forwards"]
    return render_calibrated(est, measured, cal.device, path, (*cal.notes, *lines), foreign=foreign)


def run_cores(cluster: ClusterConfig) -> int:
    """CPU cores the run's processes share on a CPU cluster: this machine's (its CPU affinity) where the kind runs
    the work in this process (``runs_here``: ``local``), else ``cpus_per_task`` on each of the cluster's nodes."""
    from jobs.cluster.kinds import cluster_kind
    from streamgen.sizing.cpu_share import available_cores

    return available_cores() if cluster_kind(cluster).runs_here else max(1, cluster.nodes * cluster.cpus_per_task)


def run_company(flown: Pilot, plan: GridPlan, grid: GridConfig, cluster: ClusterConfig) -> float:
    """The CPU-seconds of the run's scoring beside its decoders (``Pilot.company_s``) on a CPU cluster, where they
    share the cores (``streamgen.sizing.cpu_share``); 0 on a GPU cluster, where the scorers slow no forward."""
    from jobs.run.pilot import run_examples

    gpus = cluster.nodes * cluster.gpus_per_node
    return 0.0 if gpus else flown.company_s(run_examples(plan), grid.score_workers)


def pilot_lines(flown: Pilot, cal: Estimate, answers: dict[tuple[str, str], float]) -> list[str]:
    """The pilot's facts per (model, benchmark) and what it costs, priced from the calibrated estimate: per pair,
    its decoding × the pilot's examples / the pair's examples."""
    rows = {(x.model, x.benchmark): x for x in cal.lines}
    out, cost = [*flown.notes], 0.0
    for key, f in flown.facts.items():
        line = rows.get(key)
        share = f.examples / line.examples if line and line.examples else 0.0
        cost += share * (line.gpu_hours if line else 0.0)
        used = " (earlier rows' answer length used instead)" if (f.row_model, f.benchmark) in answers else ""
        out.append(f"pilot {f.model} on {f.benchmark}: {f.examples} example(s), base answer {f.answer_tokens:.1f} tokens"
                   f"{used}; forwards executed {f.executed:,} / the rules' {f.rule:,} = factor {f.factor:.2f}")
    for model, (wall, fitted) in flown.timing.items():
        out.append(f"pilot {model}: decoded in {wall:.1f} s against the fit's {fitted:.1f} s for the same decodes: "
                   f"its seconds × {wall / fitted:.2f} (time factor)")
    if cal.company_s > 0:
        alone = cal.gpu_hours / cal.cpu_share * 3600
        out.append(f"pilot: scoring {sum(f.score_cpu_s for f in flown.facts.values()):.1f} CPU-s here, one scorer start "
                   f"{max(f.scorer_start_s for f in flown.facts.values()):.1f} CPU-s: the run's scoring is about "
                   f"{cal.company_s:.1f} CPU-s beside {alone:.1f} s of decoding on {cal.cores} core(s) with {cal.workers} "
                   f"model actor(s): its decodes × {cal.cpu_share:.2f} (the cores shared; docs/estimate.md)")
    total = cal.gpu_hours
    out.append(f"pilot: costs about {duration(cost * 3600)} of decoding here ({cost / total if total else 0:.0%} of the "
               f"calibrated estimate; on a small grid it is a large share of it)")
    return out


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def render_calibrated(roof: Estimate, cal: Estimate, device: str, path: Path, notes: tuple[str, ...] = (),
                      *, foreign: bool = False) -> str:
    """Roofline and calibrated decode seconds side by side, per (model, benchmark), warm-up and in total."""
    width = max([len(x.model) for x in roof.lines] + [5])
    measured = {(x.model, x.benchmark): x for x in cal.lines}
    rows = []
    for x in roof.lines:
        c = measured.get((x.model, x.benchmark))
        h = c.gpu_hours if c is not None else float("nan")
        rows.append(f"{x.model:<{width}}  {x.benchmark:<16} {duration(x.gpu_hours * 3600):>12} {duration(h * 3600):>12} "
                    f"{h / x.gpu_hours if x.gpu_hours else float('nan'):>8.2f}")
    warm_cal = {w.model: w for w in cal.warmups}
    warm = [f"{w.model:<{width}}  {'warm-up ×' + str(w.actors):<16} {duration(w.actors * w.seconds):>12} "
            f"{duration(warm_cal[w.model].actors * warm_cal[w.model].seconds) if w.model in warm_cal else '-':>12}"
            for w in roof.warmups]
    return "\n".join([
        f"calibrated on {device} ({path}): seconds per forward measured here, forwards as above",
        *notes,
        *([f"note: the cluster's device is {roof.device.name} but this machine has no GPU: the calibration "
           f"prices the grid on this CPU; run --calibrate on the allocation"] if foreign else []),
        f"{'model':<{width}}  {'benchmark':<16} {'roofline':>12} {'calibrated':>12} {'ratio':>8}",
        *rows, *warm,
        f"calibrated: decoding {duration(cal.gpu_hours * 3600)} ({cal.gpu_hours:,.3f} device-hours) against the "
        f"roofline's {duration(roof.gpu_hours * 3600)} ({cal.gpu_hours / max(roof.gpu_hours, 1e-12):.2f}×); with "
        f"warm-up {duration(cal.total_hours * 3600)}; wall {duration(cal.wall_h * 3600)} on {cal.workers} model actor(s)"])


def plan_dry_run(grid: GridConfig, *, results_dir: str | Path | None = None,
                 fit_on: str | Path | None = None) -> str:
    """:func:`dry_run_report`'s text; its problems raised as one ConfigError."""
    text, problems = dry_run_report(grid, results_dir=results_dir, fit_on=fit_on)
    raise_if_problems(problems, f"grid {grid.name!r} cannot run")
    return text


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def work_facts(plan: GridPlan, est: Estimate) -> WorkFacts:
    """The resource checks' facts from the estimate: each model's weights at its dtype, and the longest
    estimated unit per (model, benchmark) (a unit is keyed by its first shard id)."""
    small = known_facts(plan.models)
    model_bytes = {name: (n * _DTYPE_BYTES.get(str(cfg.dtype), 2) if (n := model_parameters(cfg)) else None)
                   or small.model_bytes.get(name) for name, cfg in plan.models.items()}
    where = {s.shard_id: (s.cell.model.name, s.cell.benchmark.name) for s in plan.shards}
    unit_s: dict[tuple[str, str], float | None] = {}
    for key, seconds in est.unit_s.items():
        if key in where:
            unit_s[where[key]] = max(seconds, unit_s.get(where[key]) or 0.0)
    return WorkFacts(model_bytes, unit_s, est.wall_h * 3600 if not est.unknown else None)


def render(grid: GridConfig, plan: GridPlan, lines: list[CellLine], out_dir: Path) -> str:
    """The plan as a fixed-width table with totals."""
    width = max([len(x.label) for x in lines] + [4])
    head = (f"dry run of grid {grid.name!r} (cluster {grid.cluster}; nothing started, nothing written)\n"
            f"results_dir {out_dir}: {len(lines)} cells, {len(plan.shards)} shards, "
            f"{sum(x.shards_done for x in lines)} already complete\n\n"
            f"{'cell':<{width}}  examples  excluded  shards  done")
    body = [f"{x.label:<{width}}  {x.examples:>8}  {x.excluded:>8}  {x.shards:>6}  {x.shards_done:>4}" for x in lines]
    tail = ["nothing to run: every shard is complete"] if all(x.shards_done == x.shards for x in lines) else []
    pinned = [f"checkpoint {m}: snapshot {c} (pre-flight passed; the actors load this commit)"
              for m, c in plan.snapshots.items() if c]
    notes = [f"resources: {n}" for n in plan.resource_notes]
    return "\n".join([head, *body, *tail, *pinned, *notes])


FORKED_KEPT = 0.5  # the stated kept-share model: every later step keeps half its draft, every cell on its own path


@dataclass(frozen=True)
class Sharing:
    """The same plan priced without sharing (every cell alone) and under the stated kept-share model."""

    alone: Estimate
    forked: Estimate | None  # None: share_work is off


def sharing_lines(est: Estimate, sharing: Sharing) -> list[str]:
    """What sharing saves, in words (docs/estimate.md, "Shared work")."""
    saved = sharing.alone.gpu_hours - est.gpu_hours
    out = [f"sharing: {est.gpu_hours:,.2f} GPU-hours with each distinct step computed once and nothing kept; "
           f"each cell alone (share_work: false) {sharing.alone.gpu_hours:,.2f}; sharing saves {saved:,.2f} "
           f"({saved / max(sharing.alone.gpu_hours, 1e-12):.0%})"]
    if sharing.forked is not None:
        out.append(f"kept-share model: if every later step kept {FORKED_KEPT:.0%} of its draft and every cell forked "
                   f"at step 2 (no later step shared, LLaDA / Dream decodes still once per prefix): "
                   f"{sharing.forked.gpu_hours:,.2f} GPU-hours")
    return out


def render_estimate(est: Estimate, grid: GridConfig, cluster: ClusterConfig,
                    answers: dict[tuple[str, str], float], sharing: Sharing | None = None) -> str:
    """The estimate: GPU-hours per (model, benchmark), totals, wall time, and what it assumes."""
    d = est.device
    width = max([len(x.model) for x in est.lines] + [5])
    alone = {(x.model, x.benchmark): x.gpu_hours for x in sharing.alone.lines} if sharing else {}
    rows = [f"{x.model:<{width}}  {x.benchmark:<16} {x.examples:>8} {x.units:>6} {x.forwards:>14,} "
            f"{x.gpu_hours:>10,.2f} {alone.get((x.model, x.benchmark), x.gpu_hours):>10,.2f} "
            f"{duration(x.gpu_hours * 3600):>12} {duration(x.max_unit_s):>12}" for x in est.lines]
    gpus = cluster.nodes * cluster.gpus_per_node
    cap = f" (workers={grid.workers} capped at {cluster.nodes} nodes × {cluster.gpus_per_node} GPUs)" \
        if gpus and grid.workers > gpus else ""
    target = target_unit_s(cluster)
    over = [v for v in est.unit_s.values() if v > target]
    long = [f"{len(over)} units estimated above {duration(target)} ({UNIT_FRACTION:g} × the {cluster.timeout_min}-minute "
            f"time limit; longest {duration(max(over))}): " + ("their one example's work alone is longer (it cannot be "
            "split further)" if grid.shard_size == "auto" else "set shard_size: auto")] if over else []
    unknown = [f"no estimate for {', '.join(est.unknown)}: no config.json cached and no `parameters:` in its YAML"] \
        if est.unknown else []
    return "\n".join([
        f"estimate on {d.name} ({d.source}): forwards from each family's procedure × roofline seconds",
        f"{'model':<{width}}  {'benchmark':<16} {'examples':>8} {'units':>6} {'forwards':>14} {'GPU-hours':>10} "
        f"{'alone':>10} {'decode':>12} {'longest unit':>12}",
        *rows, *warmup_rows(est, width), *unknown, *long, *(sharing_lines(est, sharing) if sharing else []),
        f"estimate: {est.total_hours:,.2f} GPU-hours in all ({duration(est.gpu_hours * 3600)} of decoding, "
        f"{duration(est.warmup_hours * 3600)} of warm-up); wall {duration(est.wall_h * 3600)} on {est.workers} "
        f"model actor(s){cap}",
        *assumption_lines(est, answers)])


def warmup_rows(est: Estimate, width: int) -> list[str]:
    """One row per model: its actors' untimed warm-up pairs (``streamgen.warmup``), outside every unit."""
    return [f"{w.model:<{width}}  {'warm-up':<16} {w.actors:>8} {'':>6} {w.actors * w.forwards:>14,} "
            f"{w.gpu_hours:>10,.2f} {w.gpu_hours:>10,.2f} {duration(w.actors * w.seconds):>12} {duration(w.seconds):>12}"
            f"  ({w.actors} actor(s) × 1 pair on {w.benchmark})" for w in est.warmups]


def duration(seconds: float) -> str:
    """``seconds`` in the unit that reads best: s, min or h."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:,.1f} min" if seconds < 7200 else f"{seconds / 3600:,.1f} h"


def assumption_lines(est: Estimate, answers: dict[tuple[str, str], float]) -> list[str]:
    d = est.device
    rows = f"; {len(answers)} (model, benchmark) answer lengths from earlier rows" if answers else ""
    return [
        "assumptions (docs/estimate.md):",
        f"  - seconds/forward = max(2·N·T / ({d.bf16_flops / 1e12:g} TFLOP/s bf16, {d.fp32_flops / 1e12:g} fp32 "
        f"× {d.eff_compute:g}), "
        f"N·bytes / ({d.bandwidth / 1e9:g} GB/s × {d.eff_bandwidth:g})) + layers × {d.layer_overhead_s * 1e3:g} ms; "
        f"float32 at the FP32 rate (no run enables TF32); a mixture of experts computes with its active parameters "
        f"and reads the experts its T tokens touch, 1 − (1 − k/E)^T of them",
        f"  - prompt tokens = characters / {CHARS_PER_TOKEN:g} + {TEMPLATE_TOKENS}; answers fill "
        f"{ANSWER_FRACTION:.0%} of the budget (LLaDA / Dream: their whole buffer){rows}",
        "  - every stream step keeps nothing of its draft (an upper bound; LLaDA / Dream then refill every block; "
        "what keeping saves: bench/bench_estimate_refill.py); ReFusion at 2 forwards per position (its bound); "
        "each distinct step once per unit (the base run and step 1 once, LLaDA / Dream: both verifier modes, and a "
        "step that keeps nothing reuses the base decode of its prefix); 'alone': every cell computes all its own",
        "  - wall: units packed perfectly over the actors, any actor serving any model; model loading, "
        "Ray start and scoring not counted; 'warm-up': each actor's untimed base + stream pair, once per actor "
        "that loads the model (at most one per worker and per unit), on the model's costliest cell; in the "
        "total, outside the units and the wall",
    ]
