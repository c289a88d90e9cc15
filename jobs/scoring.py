"""Scoring tasks: score a decoded shard's answers and build its rows, on CPU workers.

Model actors only decode; this runs as a plain Ray task (``num_cpus=1``), so generated code is
executed by the sandbox from a CPU worker and never forks from a model (GPU) process. F1 is computed
in-process. The task returns the shard's ``PairRecord`` and ``StepRecord`` rows: one pair row per
example, whether it was scored, excluded (one segment; empty answer) or failed (error type and
traceback).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobs.actors import DecodedShard, ExampleResult
from jobs.shards import Shard
from streamgen.cells import settings_json
from streamgen.config import BenchmarkConfig
from streamgen.records import PairRecord, StepRecord

log = logging.getLogger(__name__)

SHARD_FAILED = "ShardFailed"
"""``error_type`` of the examples of a shard that used up its attempts (its actor kept dying)."""


@dataclass(frozen=True)
class ShardContext:
    """What a scoring task needs to know about its shard besides the examples and outcomes."""

    run_id: str
    shard_id: str
    cell_id: str
    model: str
    family: str
    variant: str | None
    benchmark: BenchmarkConfig
    acceptance: str
    tau: float | None
    verifier_mode: str | None
    code_version: str
    example_ids: tuple[str, ...]
    n_segments: tuple[int, ...]
    excluded: tuple[str | None, ...]  # reason decided before decoding (one segment), per example
    cell_fingerprint: str | None = None  # streamgen.cells: every result-defining setting, hashed
    cell_settings: str | None = None  # those settings as JSON
    live_policy: str | None = None  # live cells: the drafting policy and typing rate
    live_chars_per_s: float | None = None

    @classmethod
    def for_shard(cls, shard: Shard, run_id: str, code_version: str,
                  segments: Mapping[tuple[str, str], Sequence[str]],
                  excluded: Mapping[tuple[str, str], str | None]) -> ShardContext:
        c, keys = shard.cell, [(shard.cell.benchmark.name, e) for e in shard.example_ids]
        return cls(run_id, shard.shard_id, c.cell_id, c.model.row_model, c.model.family, c.model.variant, c.benchmark,
                   c.acceptance, c.tau, c.verifier_mode, code_version, shard.example_ids,
                   tuple(len(segments[k]) for k in keys), tuple(excluded[k] for k in keys),
                   c.fingerprint, settings_json(c.settings()),
                   *((c.live.live_policy, c.live.chars_per_s[0]) if c.live is not None else ()))

    def record_context(self, device: str, actor_id: str | None,
                       thresholds: tuple[float | None, float | None] = (None, None)) -> Any:
        from streamgen.stream import RecordContext

        return RecordContext(self.run_id, self.shard_id, self.cell_id, self.model, self.family,
                             self.benchmark.name, self.benchmark.version, self.acceptance, self.tau, device,
                             actor_id=actor_id, variant=self.variant, verifier_mode=self.verifier_mode,
                             code_version=self.code_version, slot_threshold=thresholds[0],
                             token_threshold=thresholds[1], cell_fingerprint=self.cell_fingerprint,
                             cell_settings=self.cell_settings, live_policy=self.live_policy,
                             live_chars_per_s=self.live_chars_per_s)


@dataclass(frozen=True)
class ShardRows:
    pairs: tuple[PairRecord, ...]
    steps: tuple[StepRecord, ...]
    errors: int
    excluded: int
    score_s: float
    sandbox_errors: tuple[str, ...] = ()  # answers the sandbox could not run after its retries (detail)


def score_shard(ctx: ShardContext, examples: Sequence[Any], decoded: DecodedShard) -> ShardRows:
    """Score both answers of every decoded example of a shard and build the shard's rows."""
    from streamgen.benchmarks import empty_answer_reason, load_benchmark

    start = time.perf_counter()
    by_id = {ex.example_id: ex for ex in examples}
    scorable = [r for r in decoded.results if r.outcome is not None
                and empty_answer_reason(r.outcome.base.text, r.outcome.stream.text) is None]
    answers = [a for r in scorable for a in (r.outcome.base.text, r.outcome.stream.text)]  # type: ignore[union-attr]
    flat = [by_id[r.example_id] for r in scorable for _ in (0, 1)]
    scores = load_benchmark(ctx.benchmark).score_many(flat, answers, workers=1) if scorable else []
    score_of = {r.example_id: (scores[2 * i], scores[2 * i + 1]) for i, r in enumerate(scorable)}
    record_ctx = ctx.record_context(decoded.device, decoded.actor_id, decoded.thresholds)
    results = {r.example_id: r for r in decoded.results}
    pairs: list[PairRecord] = []
    steps: list[StepRecord] = []
    for example_id, n_segments, reason in zip(ctx.example_ids, ctx.n_segments, ctx.excluded, strict=True):
        records = _records(record_ctx, example_id, n_segments, reason, results[example_id],
                           score_of.get(example_id))
        pairs.append(records.pair)
        steps.extend(records.steps)
    return ShardRows(tuple(pairs), tuple(steps), sum(p.error_type is not None for p in pairs),
                     sum(p.excluded_reason is not None for p in pairs), time.perf_counter() - start,
                     tuple(s.detail[-500:] for s in scores if s.status == "error"))


def _records(record_ctx: Any, example_id: str, n_segments: int, reason: str | None, result: ExampleResult,
             scores: tuple[Any, Any] | None) -> Any:
    from streamgen.stream import build_records, error_record, excluded_records

    if result.error_type is not None:
        return error_record(record_ctx, example_id, n_segments, result.error_type, result.error_traceback)
    if result.outcome is None:
        return excluded_records(record_ctx, example_id, n_segments, reason or "not_run")
    if scores is None:  # empty answer: build_records marks it excluded; nothing to score
        return build_records(result.outcome, record_ctx)
    base, stream = scores
    return build_records(result.outcome, record_ctx, base.quality, stream.quality,
                         base_score_status=base.status, stream_score_status=stream.status,
                         sandbox_backend=base.backend or stream.backend, sandbox_view=base.view or stream.view)


def failed_shard_rows(ctx: ShardContext, error: str, device: str = "unknown") -> ShardRows:
    """Error rows for every example of a shard that could not be decoded (its actor kept dying)."""
    from streamgen.stream import error_record

    record_ctx = ctx.record_context(device, None)
    pairs = tuple(error_record(record_ctx, e, n, SHARD_FAILED, error).pair
                  for e, n in zip(ctx.example_ids, ctx.n_segments, strict=True))
    return ShardRows(pairs, (), len(pairs), 0, 0.0)


def remote_score_shard(ctx: ShardContext, examples: Sequence[Any], decoded: DecodedShard) -> Any:
    """Submit :func:`score_shard` as a Ray task on a CPU worker; returns its ref."""
    return _remote_score_shard().remote(ctx, tuple(examples), decoded)


@functools.cache
def _remote_score_shard() -> Any:
    import ray

    # max_retries: a worker lost to the OOM killer or a crash is retried; exceptions are not.
    return ray.remote(score_shard).options(num_cpus=1, max_retries=2)
