"""The model actor: one model per actor (one GPU, or some CPUs), running shards of that model.

Per example the actor runs the base run and the stream run back to back in the order the shard
prescribes (seeded, balanced per cell, see :mod:`jobs.grid.shards`), so both runs see the same device
state. It takes a work unit (:mod:`jobs.grid.units`): the shards of cells that differ only in
acceptance/τ, whose base run and first stream step run once per example (``streamgen.shared_example``). A failing example becomes an error result with its traceback; the actor
carries on. Scoring never happens here (it runs on CPU workers, :mod:`jobs.run.rows`).

The actor class is plain Python; :func:`actor_options` gives the Ray resources and
:func:`spawn_model_actor` wraps it, so tests can also run it in-process.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.grid.shard_tasks import DecodedShard, ExampleResult, ExampleTask, Placement, ShardTask
from jobs.grid.units import sharing_key
from jobs.run.spool import SpoolKey, UnitSpool, open_unit_spool
from streamgen.config import BenchmarkConfig, ModelConfig
from streamgen.decoding.base import Decoder
from streamgen.decoding.meter import MeterReading

if TYPE_CHECKING:  # the driver imports this module without torch/transformers; actors import them
    from streamgen.decoding.family import ModelFamily
    from streamgen.models.weights import LoadedModel
    from streamgen.results.cells import Cell
    from streamgen.stream import PairOutcome
    from streamgen.warmup import WarmUp

log = logging.getLogger(__name__)

GPU_ACTOR_CPUS = 1  # the CPU a GPU model actor reserves for its launch loop (actor_options)


@dataclass(frozen=True)
class ActorInfo:
    actor_id: str
    pid: int
    host: str
    device: str  # "cpu" or "cuda:<device name>"
    gpu_ids: tuple[str, ...]
    load_s: float


def actor_options(*, use_gpu: bool, cpus_per_actor: float = 1.0) -> dict[str, Any]:
    """Ray resources of one model actor: a whole GPU and one CPU on GPU machines, else ``cpus_per_actor`` CPUs.

    A GPU actor reserves its CPU: batch-1 decoding is bound by the host's kernel-launch loop, and with
    ``num_cpus=0`` Ray would hand every CPU of the node to scoring tasks (their sandbox programs) while
    the actor is timed. ``jobs.grid.allocation_fit`` checks that a node has a CPU per GPU actor plus the scorers.

    ``max_restarts=0``: a dead actor stays dead and the scheduler starts a fresh one elsewhere.
    ``SPREAD``: on a multi-node cluster the actors go to different nodes first (Ray's default packs
    them onto the driver's node); on one node it changes nothing.
    """
    if use_gpu:
        return {"num_gpus": 1, "num_cpus": GPU_ACTOR_CPUS, "max_restarts": 0, "scheduling_strategy": "SPREAD"}
    return {"num_gpus": 0, "num_cpus": cpus_per_actor, "max_restarts": 0, "scheduling_strategy": "SPREAD"}


def spawn_model_actor(model: ModelConfig, *, use_gpu: bool, cpus_per_actor: float = 1.0,
                      threads: int = 1, verbose: bool = False, warm_up: bool = True, cpu_fallback: bool = False) -> Any:
    """Start a Ray actor holding ``model`` (loading starts at once, in the background; ``verbose``: with
    the libraries' model-loading progress bars; ``warm_up``: one untimed pair before its first timed one;
    ``cpu_fallback``: a rehearsal, see :func:`pick_device`)."""
    import ray

    remote_cls = ray.remote(ModelActor).options(**actor_options(use_gpu=use_gpu, cpus_per_actor=cpus_per_actor))
    return remote_cls.remote(model, threads=threads, verbose=verbose, warm_up=warm_up, cpu_fallback=cpu_fallback)


def spawn_actor_for(models: Mapping[str, ModelConfig], name: str, *, use_gpu: bool, verbose: bool = False,
                    warm_up: bool = True, cpu_fallback: bool = False) -> Any:
    """:func:`spawn_model_actor` for the model called ``name`` (the scheduler's groups are model names)."""
    return spawn_model_actor(models[name], use_gpu=use_gpu, verbose=verbose, warm_up=warm_up,
                             cpu_fallback=cpu_fallback)


def submit_unit(actor: Any, unit: Any, spool_dir: str | None = None) -> Any:
    """Hand a work unit's shard tasks (``jobs.run.scheduler.WorkUnit.payload``) to a model actor; its ref.
    ``spool_dir``: where the actor keeps the unit's finished examples (``jobs.run.spool``; None: nowhere)."""
    return actor.run_unit.remote(unit.payload, spool_dir)


class DeviceUnavailable(RuntimeError):
    """A model actor holds a GPU but torch finds no CUDA, and the cluster is no rehearsal."""


def pick_device(cpu_fallback: bool = False) -> tuple[str, str, Placement]:
    """(torch device, device label for result rows, where the actor runs).

    An actor Ray gave a GPU runs on it; if torch finds no CUDA there (a CPU build of torch, a broken
    driver, or the test cluster's fake GPUs) it raises :class:`DeviceUnavailable`, unless
    ``cpu_fallback`` (the cluster's ``rehearsal: true``): then it runs on CPU, says so in a warning and
    records it (``Placement.cpu_fallback``, the runs row's inventory). Never silently.
    """
    import torch

    try:
        import ray

        gpu_ids = tuple(str(g) for g in ray.get_gpu_ids()) if ray.is_initialized() else ()
    except ImportError:
        gpu_ids = ()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if gpu_ids and torch.cuda.is_available():  # Ray set CUDA_VISIBLE_DEVICES: our GPU is cuda:0
        return "cuda:0", f"cuda:{torch.cuda.get_device_name(0)}", Placement(gpu_ids, visible)
    if gpu_ids and not cpu_fallback:
        raise DeviceUnavailable(
            f"this model actor holds GPU {','.join(gpu_ids)} (CUDA_VISIBLE_DEVICES={visible}) but torch "
            f"{torch.__version__} finds no CUDA: install a CUDA build of torch on the nodes (docs/cluster.md); "
            "on a test cluster with fake GPUs, set rehearsal: true in the cluster config")
    if gpu_ids:
        log.warning("rehearsal: holding GPU %s (CUDA_VISIBLE_DEVICES=%s) but torch finds no CUDA: the model "
                    "runs on CPU", ",".join(gpu_ids), visible)
    return "cpu", "cpu", Placement(gpu_ids, visible, cpu_fallback=bool(gpu_ids))


class ModelActor:
    """Holds one model and runs shards of it."""

    def __init__(self, model: ModelConfig, *, threads: int = 1, verbose: bool = False, warm_up: bool = True,
                 cpu_fallback: bool = False) -> None:
        import torch

        from streamgen.models.weights import loading_bars

        torch.set_num_threads(max(1, threads))
        self.model = model
        self.device, self.device_label, self.placement = pick_device(cpu_fallback)
        self.actor_id = f"{socket.gethostname()}:{os.getpid()}"
        self._decoders: dict[tuple[str, str | None, int, tuple[str, ...]], Decoder] = {}
        from streamgen.decoding.numerics import make_deterministic

        make_deterministic(self.device)  # before the weights load: cuBLAS reads its workspace setting once
        start = time.perf_counter()
        with loading_bars(verbose):  # the libraries' loading bars only with the grid's `verbose: true`
            self._family, self._loaded = _load_weights(model, self.device)
        self.load_s = time.perf_counter() - start
        self._load_reported = False
        self._warm_up_pending = warm_up  # the untimed pair runs before the first unit's clocks start
        self.warmup: WarmUp | None = None
        self.numerics = _numerics_json(self._loaded.model, self.device_label)
        log.info("actor %s loaded %s on %s in %.1f s", self.actor_id, model.name, self.device, self.load_s)

    def info(self) -> ActorInfo:
        return ActorInfo(self.actor_id, os.getpid(), socket.gethostname(), self.device_label,
                         self.placement.gpu_ids, self.load_s)

    def _decoder(self, benchmark: BenchmarkConfig, verifier_mode: str | None, max_new_tokens: int) -> Decoder:
        """A decoder over the loaded weights for a (benchmark, verifier mode, answer budget) cell, with the
        model's per-benchmark settings and the benchmark's stop strings applied (cheap to build)."""
        from streamgen.benchmarks.base import stop_strings

        stops = stop_strings(benchmark)
        key = (benchmark.name, verifier_mode, int(max_new_tokens), stops)
        if key not in self._decoders:
            cfg = self.model
            if verifier_mode is not None:
                cfg = dataclasses.replace(cfg, decoding={**cfg.decoding, "verifier_mode": verifier_mode})
            decoder = self._family.build_decoder(cfg, self._loaded.model, self._loaded.tokenizer,
                                                 self.device, int(max_new_tokens))
            self._decoders[key] = decoder.for_benchmark(benchmark.name).with_stop_strings(stops)
        return self._decoders[key]

    def run_shard(self, task: ShardTask) -> DecodedShard:
        return self.run_unit((task,))[0]

    def run_unit(self, tasks: Sequence[ShardTask], spool_dir: str | None = None) -> tuple[DecodedShard, ...]:
        """Decode a work unit: one shard, or shards of cells that differ only in acceptance/τ over the
        same examples (``jobs.grid.units``), whose base run and first step run once per example.
        With ``spool_dir`` each finished example is persisted there, and examples an earlier (killed)
        attempt persisted are taken from it instead of decoded (``jobs.run.spool``)."""
        if self._warm_up_pending:
            self._warm_up(tasks[0].cell)
        start, cpu_start, cell = time.perf_counter(), time.process_time(), tasks[0].cell
        if len({sharing_key(t.shard) for t in tasks}) != 1:
            raise ValueError("a work unit's shards must differ only in acceptance/τ and have the same examples "
                             f"(jobs.grid.units.group_shards); got {[t.cell.label for t in tasks]}")
        decoders = [self._decoder(cell.benchmark, t.cell.verifier_mode, cell.max_new_tokens) for t in tasks]
        decoder, rules = decoders[0], [t.cell.rule for t in tasks]
        decode: Callable[[Sequence[ExampleTask]], list[ExampleResult]]
        if cell.live is not None:  # live streams run on the clock: never shared (one shard per unit)
            from streamgen.live import LiveSettings

            live = LiveSettings.from_config(cell.live)
            decode = functools.partial(self._run_live, decoder, rules[0], live)
        else:
            from streamgen.stream_tree import StreamCell

            cells = [StreamCell(d, r) for d, r in zip(decoders, rules, strict=True)]
            decode = functools.partial(self._run_shared, cells, all(t.share_work for t in tasks))
        spool = open_unit_spool(spool_dir, SpoolKey(tuple(t.shard.shard_id for t in tasks), self.device_label,
                                                    tasks[0].code_version))
        per_task = _transpose(self._each_example(tasks, decode, spool))
        load_s, self._load_reported = (0.0 if self._load_reported else self.load_s), True
        return _decoded(tasks, per_task, self, time.perf_counter() - start, time.process_time() - cpu_start, load_s,
                        effective_thresholds(decoder))

    def _each_example(self, tasks: Sequence[ShardTask], decode: Callable[[Sequence[ExampleTask]], list[ExampleResult]],
                      spool: UnitSpool | None) -> list[list[ExampleResult]]:
        """Per example, every shard's result: from the spool where an earlier attempt finished it, else
        decoded now and appended to the spool before the next example starts."""
        done = spool.load() if spool is not None else {}
        if done:
            log.info("actor %s: resumed %d of %d examples from spool %s", self.actor_id, len(done),
                     len(tasks[0].examples), spool.path if spool else None)
        out = []
        for exs in zip(*(t.examples for t in tasks), strict=True):
            if (results := done.get(exs[0].example_id)) is not None:
                out.append(list(results))
                continue
            out.append(decode(exs))
            if spool is not None:
                try:
                    spool.append(exs[0].example_id, out[-1])
                except OSError as exc:
                    log.warning("spool %s: cannot append (%s); the rest of this unit is not spooled", spool.path, exc)
                    spool = None
        return out

    def _warm_up(self, cell: Cell) -> None:
        """One untimed pair on the first cell's decoder (``streamgen.warmup``), before any timed pair and
        outside every unit's clocks: no row and no forward count sees it."""
        from streamgen.warmup import warm_up

        self._warm_up_pending = False
        decoder = self._decoder(cell.benchmark, cell.verifier_mode, cell.max_new_tokens)
        try:
            self.warmup = warm_up(decoder)
        except Exception as exc:  # noqa: BLE001 — the timed pairs still run; a failing one becomes its row
            if is_fatal_device_error(exc):
                log.error("device error in the warm-up pair, exiting the actor: %s", exc)
                os._exit(1)
            log.warning("actor %s: the warm-up pair failed (%s: %s); the first timed pair will carry the "
                        "start-up cost (grid option warm_up=false skips the warm-up)", self.actor_id,
                        type(exc).__name__, exc)
            return
        log.info("actor %s, %s: %s", self.actor_id, self.model.name, self.warmup.describe())

    def _run_shared(self, cells: Sequence[Any], share: bool, exs: Sequence[ExampleTask]) -> list[ExampleResult]:
        """One example for every cell of the unit (``streamgen.shared_example``): stream-first cells first, then
        base-first ones (so the shared base run sits between them, adjacent to both), results back in the
        unit's order. ``share``: remember decodes across steps (``share_work``)."""
        ex = exs[0]
        if ex.request is None:
            return [ExampleResult(e.example_id, e.base_first, None) for e in exs]
        from streamgen.shared_example import SharedExample

        order = sorted(range(len(exs)), key=lambda j: exs[j].base_first)
        results: dict[int, ExampleResult] = {}
        try:
            shared = SharedExample(cells, ex.request, share=share)
        except Exception as exc:  # noqa: BLE001 — a failing example becomes a row, the shard goes on
            return [self._failed(e, exc, 0.0) for e in exs]
        meters = [c.decoder for c in cells]
        for j in order:
            results[j] = self._attempt(exs[j], functools.partial(shared.pair, j, base_first=exs[j].base_first),
                                       meters)
        return [results[j] for j in range(len(exs))]

    def _run_live(self, decoder: Decoder, rule: Any, live: Any, exs: Sequence[ExampleTask]) -> list[ExampleResult]:
        """One example of a live unit (one shard: ``exs`` holds its one task's example)."""
        ex = exs[0]
        if ex.request is None:
            return [ExampleResult(ex.example_id, ex.base_first, None)]
        from streamgen.shared_example import Executed
        from streamgen.stream import run_pair

        request = ex.request  # narrowed above; a closure would not see that

        def pair() -> tuple[PairOutcome, Executed]:
            outcome = run_pair(decoder, request, rule, base_first=ex.base_first, live=live)
            return outcome, Executed(_forwards(outcome), _forward_wall(outcome))

        return [self._attempt(ex, pair, [decoder])]

    def _attempt(self, ex: ExampleTask, pair: Callable[[], tuple[PairOutcome, Any]],
                 decoders: Sequence[Decoder]) -> ExampleResult:
        """One pair; if it raises, its row still carries the model calls it made before raising (read
        from the decoders' meters: a unit of both verifier modes has two), so ``forwards_executed`` is the
        work the actor really did."""
        start, before = time.perf_counter(), _meter_reading(decoders)
        try:
            outcome, done = pair()
            spent = _meter_since(decoders, before)
            if spent is not None and spent.forwards != done.forwards:
                raise AccountingError(  # the pair's runs missed (or double counted) calls the meter saw
                    f"the pair's runs account for {done.forwards} model calls but the decoder's meter counted "
                    f"{spent.forwards} while it ran: a model call outside every run's span (docs/accounting.md)")
        except Exception as exc:  # noqa: BLE001 — a failing example becomes a row, the shard goes on
            return self._failed(ex, exc, time.perf_counter() - start, _meter_since(decoders, before))
        return ExampleResult(ex.example_id, ex.base_first, outcome, None, None, time.perf_counter() - start,
                             done.forward_wall_s, done.forwards)

    def _failed(self, ex: ExampleTask, exc: Exception, wall_s: float, spent: MeterReading | None = None) -> ExampleResult:
        if is_fatal_device_error(exc):
            # A CUDA error poisons the process: exit so the scheduler re-queues the shard on a
            # fresh actor, rather than recording errors from a broken device (ray PR #60145).
            log.error("device error in example %s, exiting the actor: %s", ex.example_id, exc)
            os._exit(1)
        log.warning("example %s failed: %s", ex.example_id, exc)
        return ExampleResult(ex.example_id, ex.base_first, None, type(exc).__name__, traceback.format_exc(), wall_s,
                             spent.forward_wall_s if spent else 0.0, spent.forwards if spent else 0)

    def pid(self) -> int:
        return os.getpid()


class AccountingError(RuntimeError):
    """A pair's runs and the decoder's meter disagree on the model calls made: a family made a call
    outside the spans its results are counted from. Recorded as the example's error."""


def _meter_reading(decoders: Sequence[Decoder]) -> MeterReading | None:
    """The decoders' forward meters' totals now, each meter once (every family's decoder carries one;
    decoders over the same weights may share theirs); None without one."""
    meters = {id(m): m for m in (getattr(d, "meter", None) for d in decoders) if m is not None}
    if not meters:
        return None
    return functools.reduce(lambda a, b: a + b, (m.reading() for m in meters.values()))


def _meter_since(decoders: Sequence[Decoder], before: MeterReading | None) -> MeterReading | None:
    """The decoders' meter totals since ``before`` (None without a meter)."""
    after = _meter_reading(decoders)
    return after - before if after is not None and before is not None else None


def _load_weights(cfg: ModelConfig, device: str) -> tuple[ModelFamily, LoadedModel]:
    """(family, loaded model+tokenizer): the weights are loaded once per actor and shared by every
    decoder built over them (as ``streamgen.families.registry.load_decoder`` does for one decoder)."""
    from streamgen.families.registry import model_family

    family = model_family(cfg.family)
    return family, family.load(cfg, device)


def effective_thresholds(decoder: Decoder) -> tuple[float | None, float | None]:
    """(slot, token) thresholds a ReFusion decoder runs with; (None, None) for other families."""
    settings = getattr(decoder, "settings", None)
    return getattr(settings, "slot_threshold", None), getattr(settings, "token_threshold", None)


def is_fatal_device_error(exc: BaseException) -> bool:
    """CUDA out-of-memory or a CUDA runtime error (the device state can no longer be trusted)."""
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "CUDA error" in str(exc)


def _decoded(tasks: Sequence[ShardTask], per_task: Sequence[Sequence[ExampleResult]], actor: ModelActor,
             busy_s: float, cpu_s: float, load_s: float, thresholds: tuple[float | None, float | None],
             ) -> tuple[DecodedShard, ...]:
    """One DecodedShard per task; the unit's time not spent in any pair, its CPU time and the model load
    go to the first shard (the sums over the unit are what the actor spent)."""
    out = []
    for i, (task, results) in enumerate(zip(tasks, per_task, strict=True)):
        fresh = [r for r in results if not r.resumed]  # a resumed example's time was spent by an earlier attempt
        own = sum(r.wall_s for r in fresh)
        rest = busy_s - sum(r.wall_s for rs in per_task for r in rs if not r.resumed) if i == 0 else 0.0
        out.append(DecodedShard(task.shard.shard_id, actor.actor_id, actor.device_label, tuple(results),
                                own + rest, sum(r.forward_wall_s for r in fresh), load_s if i == 0 else 0.0,
                                cpu_s if i == 0 else 0.0, thresholds, actor.numerics, actor.placement))
    return tuple(out)


def _numerics_json(model: Any, device: str) -> str:
    """The actor's numerics record as JSON (the KV cache class: the autoregressive decoders'; the
    diffusion decoders build the same class)."""
    from streamgen.decoding.numerics import numerics_record
    from streamgen.families.autoregressive.decoder import new_cache

    return numerics_record(model, device, type(new_cache()).__name__).to_json()


def _transpose(rows: Sequence[Sequence[ExampleResult]]) -> list[list[ExampleResult]]:
    """Per-example lists of per-task results → per-task lists of per-example results."""
    return [list(col) for col in zip(*rows, strict=True)] if rows else []


def _forwards(outcome: PairOutcome) -> int:
    return outcome.base.forwards + sum(s.answer.forwards for s in outcome.steps)


def _forward_wall(outcome: PairOutcome) -> float:
    steps: Sequence[Any] = outcome.steps
    return outcome.base.meter.forward_wall_s + sum(s.answer.meter.forward_wall_s for s in steps)
