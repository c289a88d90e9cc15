"""The pilot of ``--calibrate``: a few examples of each (model, benchmark) decoded here, outside the results,
to learn what the grid will do that the estimate's rules cannot know.

The estimate (``jobs.grid.gpu_hours``) prices every decode by the family's forward rule with two guesses: the
answer length (half the budget where no earlier rows exist) and the forwards (each cell of a unit on one path
that keeps nothing). The pilot replaces both with facts. For every (model, benchmark) it takes, of each kind of
work unit the grid has (its cells: acceptance rules, verifier modes, budget), the first ``pilot`` examples that
are not excluded up front, and decodes them with the very code a model actor runs for a unit
(``jobs.run.actors.ModelActor.run_unit``: every cell of the unit, sharing as the grid configures it), on this
machine, with no spool and no result file: nothing it decodes reaches ``results_dir``. From it:

- ``answer_tokens``: the mean base answer length (tokens) of those examples;
- ``factor`` = forwards the pilot executed / forwards the estimate's rules give for the same examples, each at its
  own base answer length (``jobs.grid.gpu_hours.example_cost``, nothing kept). It carries what the rules leave
  out: cells that fork where their kept runs differ, runs that are kept (fewer forwards), answers that stop early.

The calibrated estimate is then the fit's seconds × the rules' forwards × ``factor``, at ``answer_tokens``
(docs/estimate.md, "The pilot"). Facts are cached beside the calibration file (:func:`pilot_path`), keyed by the
model's fingerprint, the device, the dtype, the benchmark, and what changes the counts: the units' cells, the
examples decoded and ``share_work``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from jobs.grid.gpu_hours import PlanLike, example_cost
from jobs.grid.shard_tasks import DecodedShard, ShardTask
from jobs.grid.shards import Shard
from jobs.grid.units import group_shards
from streamgen.config import ModelConfig
from streamgen.results.cells import stable_hash
from streamgen.sizing.calibration import Fit, device_label, load_cache, model_fingerprint, save_cache
from streamgen.sizing.devices import DEVICES
from streamgen.sizing.parameters import ModelSize

__all__ = ["PILOT_FORMAT", "Pilot", "PilotFacts", "decode_seconds", "facts_of", "pilot_key", "pilot_path", "pilot_units", "run_examples",
           "run_pilots", "score_cpu", "scorer_start_cpu"]

PILOT_FORMAT = "streamgen-pilot/1"
_ANY_SIZE = ModelSize(1, 1, "pilot")  # the rules' forwards do not depend on the size (only their seconds do)


@dataclass(frozen=True)
class PilotFacts:
    """What the pilot of one (model, benchmark) found: examples decoded, their mean base answer length, the
    forwards its actor executed and those the estimate's rules give for the same examples."""

    model: str  # the grid's model name (an adapted variant has its own: its factor is its own)
    benchmark: str
    examples: int  # distinct examples decoded (each in every unit kind of the pair)
    answer_tokens: float  # mean base answer tokens over the base runs decoded
    executed: int  # model calls the pilot's actor executed (``DecodedShard.forwards_executed``)
    rule: int  # the estimate's rules for the same examples at their own answer lengths
    row_model: str = ""  # the rows' model name (``ModelConfig.row_model``): the key of the estimate's answer lengths
    wall_s: float = 0.0  # the pilot's decoding as the actor measured it (:func:`decode_seconds`: CPU time on a CPU)
    predicted_s: float = 0.0  # the fit's seconds for the same examples at their lengths, × ``factor`` (0: no fit)
    score_cpu_s: float = 0.0  # CPU-seconds scoring its units as the run's scorer does (the sandbox's included)
    scorer_start_s: float = 0.0  # CPU-seconds of a fresh interpreter importing what a scorer's Ray worker imports

    @property
    def factor(self) -> float:
        """Forwards executed per forward the rules give (1.0 where the rules give none)."""
        return self.executed / self.rule if self.rule else 1.0


@dataclass(frozen=True)
class Pilot:
    facts: Mapping[tuple[str, str], PilotFacts]  # (model name, benchmark) → facts
    path: Path
    notes: tuple[str, ...]

    @property
    def answer_lengths(self) -> dict[tuple[str, str], float]:
        """(row model, benchmark) → mean base answer tokens: keyed as earlier rows' answer lengths are."""
        return {(f.row_model or f.model, f.benchmark): f.answer_tokens for f in self.facts.values()}

    @property
    def factors(self) -> dict[tuple[str, str], float]:
        return {k: f.factor for k, f in self.facts.items()}

    @property
    def timing(self) -> dict[str, tuple[float, float]]:
        """model name → (the pilot's measured decoding, the fit's seconds for the same decodes), summed over the
        model's benchmarks; only pairs timed against a fit."""
        out: dict[str, tuple[float, float]] = {}
        for f in self.facts.values():
            if f.predicted_s > 0 and f.wall_s > 0:
                wall, predicted = out.get(f.model, (0.0, 0.0))
                out[f.model] = (wall + f.wall_s, predicted + f.predicted_s)
        return out

    def company_s(self, examples: Mapping[tuple[str, str], int], score_workers: int) -> float:
        """The CPU-seconds of the run's scoring: per (model, benchmark), the pilot's scoring CPU per example × the
        run's examples of the pair (``run_examples``), plus ``score_workers`` scorer starts. On a CPU device this is
        the company the decoders share the cores with (``streamgen.sizing.cpu_share``)."""
        scoring = sum(f.score_cpu_s / f.examples * examples.get((f.model, f.benchmark), 0)
                      for f in self.facts.values() if f.examples)
        return scoring + max(1, score_workers) * max((f.scorer_start_s for f in self.facts.values()), default=0.0)

    @property
    def time_factors(self) -> dict[str, float]:
        """model name → the pilot's measured decoding over what the fit predicts for the same decodes, pooled over
        the model's benchmarks: what the calibration's synthetic requests miss on this device (1.0 without a fit)."""
        return {m: wall / predicted for m, (wall, predicted) in self.timing.items()}


def pilot_path(calibration: str | Path) -> Path:
    """The pilot's cache beside the calibration file: ``calibration.json`` → ``calibration.pilot.json``."""
    p = Path(calibration)
    return p.with_name(f"{p.stem}.pilot.json")


def run_examples(plan: PlanLike) -> dict[tuple[str, str], int]:
    """(model name, benchmark) → the run's examples of the pair that are not excluded up front."""
    seen: dict[tuple[str, str], set[str]] = {}
    for s in plan.shards:
        bench = s.cell.benchmark.name
        seen.setdefault((s.model_name, bench), set()).update(e for e in s.example_ids if not plan.excluded[(bench, e)])
    return {k: len(v) for k, v in seen.items()}


def pilot_units(plan: PlanLike, pilot: int = 1) -> dict[tuple[str, str], list[tuple[Shard, ...]]]:
    """Per (model name, benchmark), the units the pilot decodes: of each unit kind (the same cells), its first
    ``pilot`` examples not excluded up front, as shards of those examples only (a kind's examples may span
    several units of the grid: shard_size 1)."""
    kinds: dict[tuple[str, str, tuple[str, ...]], list[tuple[Shard, ...]]] = {}
    for unit in group_shards(plan.shards, share=plan.grid.share_work):
        first = unit[0]
        kinds.setdefault((first.model_name, first.cell.benchmark.name, tuple(s.cell.cell_id for s in unit)), []).append(unit)
    out: dict[tuple[str, str], list[tuple[Shard, ...]]] = {}
    for (model, bench, _), units in kinds.items():
        taken = 0
        for unit in units:
            keep = [i for i, e in enumerate(unit[0].example_ids) if not plan.excluded[(bench, e)]][: pilot - taken]
            if keep:
                out.setdefault((model, bench), []).append(tuple(
                    replace(s, example_ids=tuple(s.example_ids[i] for i in keep),
                            base_first=tuple(s.base_first[i] for i in keep)) for s in unit))
                taken += len(keep)
            if taken >= pilot:
                break
    return out


def pilot_key(cfg: ModelConfig, benchmark: str, units: Sequence[Sequence[Shard]], device: str, share: bool,
              fit: Fit | None = None) -> str:
    """The cache key: model fingerprint | device | dtype | benchmark | a hash of what changes the counts (every
    unit's cells, the examples and their run order, ``share_work``) and of the fit its timing was compared with
    (another calibration: the pilot flies again)."""
    counts = stable_hash({"units": [[s.cell.identity() for s in u] for u in units],
                          "examples": [[list(s.example_ids), list(s.base_first)] for s in (u[0] for u in units)],
                          "share_work": share, **({"fit": fit.as_dict()} if fit is not None else {})})
    return f"{model_fingerprint(cfg)}|{device}|{cfg.dtype}|{benchmark}|{counts}"


def facts_of(plan: PlanLike, units: Sequence[Sequence[Shard]], decoded: Sequence[Sequence[DecodedShard]],
             fit: Fit | None = None) -> PilotFacts:
    """The facts of one (model, benchmark) from its pilot units and what the actor decoded for them: per example
    of a unit, the forwards executed (every cell's, shared ones once), its base answer length (each distinct base
    run: a unit shares one), and the rules' forwards for that example at that length. Examples that failed are
    left out of both counts. With the model's ``fit``: the actor's measured decoding of the units and the fit's
    seconds for the same examples (× the forward factor), whose ratio is the model's time factor."""
    executed = rule = 0
    wall = predicted = 0.0
    answers: list[int] = []
    examples: set[str] = set()
    for unit, shards in zip(units, decoded, strict=True):
        wall += decode_seconds(shards)
        first = unit[0]
        cell, bench = first.cell, first.cell.benchmark.name
        for i, example_id in enumerate(first.example_ids):
            results = [d.results[i] for d in shards]
            if any(r.outcome is None for r in results):
                continue
            answer = len(results[0].outcome.base.token_ids)  # type: ignore[union-attr]
            cost = example_cost(cell.model, bench, cell.max_new_tokens, plan.examples[bench][example_id],
                                plan.segments[(bench, example_id)], len(unit), DEVICES["cpu"], _ANY_SIZE, answer,
                                modes=[s.cell.verifier_mode for s in unit], share=plan.grid.share_work, fit=fit)
            executed += sum(r.forwards_executed for r in results)
            rule += cost.forwards  # the rules' count: the same with or without a fit
            predicted += cost.seconds if fit is not None else 0.0
            answers.append(answer)
            examples.add(example_id)
    model = units[0][0].cell.model
    factor = executed / rule if rule else 1.0
    return PilotFacts(model.name, units[0][0].cell.benchmark.name, len(examples),
                      sum(answers) / len(answers) if answers else 0.0, executed, rule, model.row_model,
                      wall if fit is not None else 0.0, predicted * factor)


def decode_seconds(shards: Sequence[DecodedShard]) -> float:
    """A decoded unit's time for the time factor: on a GPU its wall (Σ ``busy_s``); on a CPU the actor's CPU time
    (Σ ``cpu_s``: the unit's, reported with its first shard), which does not depend on what else shares the cores
    while the pilot flies (its processes load models beside each other's decodes); the run's own sharing is priced
    apart (``Pilot.company_s``, ``streamgen.sizing.cpu_share``)."""
    cpu = sum(d.cpu_s for d in shards)
    return cpu if cpu > 0 and all(d.device == "cpu" for d in shards) else sum(d.busy_s for d in shards)


def decode_units(cfg: ModelConfig, tasks: Sequence[Sequence[ShardTask]]) -> list[tuple[DecodedShard, ...]]:
    """Load ``cfg`` on a model actor in this process and decode each unit as the grid's actors do: its untimed
    warm-up pair first (as a run's actor, so the units' measured time is as clean as a run's), no spool."""
    from jobs.run.actors import ModelActor

    actor = ModelActor(cfg, warm_up=True)
    return [actor.run_unit(tuple(unit)) for unit in tasks]


Decode = Callable[[ModelConfig, Sequence[Sequence[ShardTask]]], list[tuple[DecodedShard, ...]]]


def run_pilots(plan: Any, path: str | Path, *, pilot: int = 1, device: str = "cpu", processes: int = 1,
               decode: Decode | None = None, fits: Mapping[str, Fit] | None = None, score: bool = True) -> Pilot:
    """The facts of every (model, benchmark) of ``plan``: read from ``path`` where an entry of the same key is
    there, else decoded (``decode``; default :func:`decode_units` in ``processes`` spawned processes, one
    (model, benchmark) each, or one per model with ``processes=1``, as on a GPU; 0: in this process) and written back. A pair whose pilot fails keeps the
    estimate's guesses (one line)."""
    entries = load_pilots(path)
    label = device_label(device)
    todo: dict[tuple[str, str], tuple[str, list[tuple[Shard, ...]]]] = {}
    facts: dict[tuple[str, str], PilotFacts] = {}
    notes: list[str] = []
    for (model, bench), units in pilot_units(plan, pilot).items():
        key = pilot_key(plan.models[model], bench, units, label, plan.grid.share_work, (fits or {}).get(model))
        if key in entries and (not score or entries[key].get("scored")):  # wanted scored, cached unscored: fly again
            f = PilotFacts(**entries[key]["facts"])
            facts[(f.model, f.benchmark)] = f
            notes.append(f"pilot of {model} on {bench}: read from {path}")
        else:
            todo[(model, bench)] = (key, units)
    tasks = {k: [[plan.task(s, "pilot", "pilot") for s in u] for u in units] for k, (_, units) in todo.items()}
    t0 = time.perf_counter()
    done = _decode_all(plan, tasks, decode, processes)
    changed = False
    started: float | None = None  # a scorer start's CPU-seconds, timed once per flight
    for (model, bench), (key, units) in todo.items():
        result = done[(model, bench)]
        if isinstance(result, BaseException):
            first = (str(result).strip().splitlines() or [""])[0][:300]
            notes.append(f"pilot of {model} on {bench}: failed here ({type(result).__name__}: {first}); its estimate "
                         f"keeps the assumed answer length and the rules' forwards")
            continue
        f = facts_of(plan, units, result, (fits or {}).get(model))
        scored_ok = False
        if score and f.examples:
            try:
                scored = score_cpu(tasks[(model, bench)], result)
                started = scorer_start_cpu() if started is None else started
                f, scored_ok = replace(f, score_cpu_s=scored, scorer_start_s=started), True
            except Exception as exc:  # noqa: BLE001 — one line: the estimate then prices no company for this pair
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                notes.append(f"pilot of {model} on {bench}: scoring failed here ({type(exc).__name__}: {first}); "
                             f"its scoring is left out of the company on a CPU")
        if not f.examples:
            notes.append(f"pilot of {model} on {bench}: no example decoded without an error; its estimate keeps the "
                         f"assumed answer length and the rules' forwards")
            continue
        facts[(f.model, f.benchmark)] = f
        entries[key] = {"model": model, "benchmark": bench, "device": label, "facts": asdict(f), "scored": scored_ok,
                        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        changed = True
        notes.append(f"pilot of {model} on {bench}: decoded {f.examples} example(s), written to {path}")
    if changed:
        save_pilots(path, entries)
    if todo:
        notes.append(f"pilot: {len(todo)} (model, benchmark) pair(s) decoded in {time.perf_counter() - t0:.1f} s"
                     + (f" ({processes} processes at once)" if decode is None and processes > 1 else ""))
    return Pilot(facts, Path(path), tuple(notes))


def _cpu_s() -> float:
    """CPU-seconds of this process and of its children that have been waited for."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def score_cpu(tasks: Sequence[Sequence[ShardTask]], decoded: Sequence[Sequence[DecodedShard]]) -> float:
    """CPU-seconds of scoring every unit as the run's scorer does (``jobs.run.rows.score_unit``: each distinct
    answer once, generated code in the sandbox), in this process: its own and its sandbox children's. The
    benchmarks are loaded before the clock starts (a scorer's start is :func:`scorer_start_cpu`)."""
    from jobs.run.rows import score_unit
    from streamgen.benchmarks import load_benchmark

    for unit in tasks:
        for t in unit:
            load_benchmark(t.cell.benchmark)
    before = _cpu_s()
    for unit, shards in zip(tasks, decoded, strict=True):
        score_unit(tuple(unit), tuple(shards))
    return _cpu_s() - before


def scorer_start_cpu() -> float:
    """CPU-seconds of a fresh interpreter importing what a scorer's Ray worker imports (``ray``,
    ``jobs.run.rows``): what each scoring worker the run starts costs before it scores."""
    import os
    import subprocess
    import sys

    before = _cpu_s()
    subprocess.run([sys.executable, "-c", "import ray, jobs.run.rows"], check=True, capture_output=True, timeout=600,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    return _cpu_s() - before


def _decode_all(plan: Any, tasks: Mapping[tuple[str, str], list[list[ShardTask]]], decode: Decode | None,
                processes: int) -> dict[tuple[str, str], Any]:
    """Per (model, benchmark): the decoded units, or the exception that stopped them."""
    out: dict[tuple[str, str], Any] = {}
    if decode is not None or processes < 1:
        for (model, bench), units in tasks.items():
            try:
                out[(model, bench)] = (decode or decode_units)(plan.models[model], units)
            except Exception as exc:  # noqa: BLE001 — one line, the estimate keeps its guesses for this pair
                out[(model, bench)] = exc
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # one job per (model, benchmark) where processes share a CPU (loads are cheap, the pairs spread); one per
    # model in a single process (a GPU: each job loads its model once)
    groups: dict[Any, list[tuple[str, str]]] = {}
    for k in tasks:
        groups.setdefault(k[0] if processes == 1 else k, []).append(k)
    with ProcessPoolExecutor(max(1, min(processes, len(groups) or 1)), mp_context=multiprocessing.get_context("spawn")) as pool:
        jobs = {g: pool.submit(decode_units, plan.models[keys[0][0]], [u for k in keys for u in tasks[k]])
                for g, keys in groups.items()}
        for g, job in jobs.items():
            try:
                decoded = job.result()
            except Exception as exc:  # noqa: BLE001 — as above
                out.update({k: exc for k in groups[g]})
                continue
            for k in groups[g]:
                out[k], decoded = decoded[:len(tasks[k])], decoded[len(tasks[k]):]
    return out


def load_pilots(path: str | Path) -> dict[str, dict[str, Any]]:
    """The entries of a pilot file (none if it does not exist); ConfigError in one line when it is not one."""
    return load_cache(path, fmt=PILOT_FORMAT, check=lambda e: PilotFacts(**e["facts"]), what="a streamgen pilot",
                      fix="name another calibration file with --calibrate=PATH (its pilot file sits beside it)")


def save_pilots(path: str | Path, entries: Mapping[str, Mapping[str, Any]]) -> None:
    save_cache(path, entries, fmt=PILOT_FORMAT)
