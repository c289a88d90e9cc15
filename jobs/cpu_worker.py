"""The CPU-worker task: score a decoded shard's answers and turn them into the shard's rows.

Model actors only decode; this runs as a plain Ray task (``num_cpus=1``), so generated code is
executed by the sandbox from a CPU worker and never forks from a model (GPU) process. F1 is computed
in-process. The task returns the shard's ``PairRecord`` and ``StepRecord`` rows (built by
``streamgen.rows``): one pair row per example, whether it was scored, excluded (one segment; empty
answer) or failed (error type and traceback).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

from jobs.actors import DecodedShard, ExampleResult, ExampleTask, ShardTask
from streamgen.records import PairRecord, StepRecord

log = logging.getLogger(__name__)

SHARD_FAILED = "ShardFailed"
"""``error_type`` of the examples of a shard that used up its attempts (its actor kept dying)."""


@dataclass(frozen=True)
class ShardRows:
    pairs: tuple[PairRecord, ...]
    steps: tuple[StepRecord, ...]
    errors: int
    excluded: int
    score_s: float
    sandbox_errors: tuple[str, ...] = ()  # answers the sandbox could not run after its retries (detail)


def score_shard(task: ShardTask, decoded: DecodedShard) -> ShardRows:
    """Score both answers of every decoded example of a shard and build the shard's rows."""
    from streamgen.benchmarks import empty_answer_reason, load_benchmark

    start = time.perf_counter()
    by_id = {ex.example_id: ex for ex in task.examples}
    scorable = [r for r in decoded.results if r.outcome is not None
                and empty_answer_reason(r.outcome.base.text, r.outcome.stream.text) is None]
    answers = [a for r in scorable for a in (r.outcome.base.text, r.outcome.stream.text)]  # type: ignore[union-attr]
    flat = [by_id[r.example_id].example for r in scorable for _ in (0, 1)]
    scores = load_benchmark(task.cell.benchmark).score_many(flat, answers, workers=1) if scorable else []
    score_of = {r.example_id: (scores[2 * i], scores[2 * i + 1]) for i, r in enumerate(scorable)}
    ctx = task.row_context(decoded.device, decoded.actor_id, decoded.thresholds)
    results = {r.example_id: r for r in decoded.results}
    pairs: list[PairRecord] = []
    steps: list[StepRecord] = []
    for ex in task.examples:
        rows = _rows(ctx, ex, results[ex.example_id], score_of.get(ex.example_id, (None, None)))
        pairs.append(rows.pair)
        steps.extend(rows.steps)
    return ShardRows(tuple(pairs), tuple(steps), sum(p.error_type is not None for p in pairs),
                     sum(p.excluded_reason is not None for p in pairs), time.perf_counter() - start,
                     tuple(s.detail[-500:] for s in scores if s.status == "error"))


def _rows(ctx: Any, ex: ExampleTask, result: ExampleResult, scores: tuple[Any, Any]) -> Any:
    from streamgen.rows import error_rows, excluded_rows, outcome_rows

    if result.error_type is not None:
        return error_rows(ctx, ex.example_id, ex.n_segments, result.error_type, result.error_traceback)
    if result.outcome is None:
        return excluded_rows(ctx, ex.example_id, ex.n_segments, ex.excluded or "not_run")
    return outcome_rows(result.outcome, ctx, *scores)  # unscored (empty answer): marked excluded there


def failed_shard_rows(task: ShardTask, error: str, device: str = "unknown") -> ShardRows:
    """Error rows for every example of a shard that could not be decoded (its actor kept dying)."""
    from streamgen.rows import error_rows

    ctx = task.row_context(device)
    pairs = tuple(error_rows(ctx, ex.example_id, ex.n_segments, SHARD_FAILED, error).pair for ex in task.examples)
    return ShardRows(pairs, (), len(pairs), 0, 0.0)


def score_unit(tasks: tuple[ShardTask, ...], decoded: tuple[DecodedShard, ...]) -> tuple[ShardRows, ...]:
    """:func:`score_shard` for each shard of a work unit (``jobs.shared_work``), in order."""
    return tuple(score_shard(t, d) for t, d in zip(tasks, decoded, strict=True))


def remote_score_unit(tasks: tuple[ShardTask, ...], decoded: tuple[DecodedShard, ...]) -> Any:
    """Submit :func:`score_unit` as a Ray task on a CPU worker; returns its ref."""
    return _remote_score_unit().remote(tasks, decoded)


@functools.cache
def _remote_score_unit() -> Any:
    import ray

    # max_retries: a worker lost to the OOM killer or a crash is retried; exceptions are not.
    return ray.remote(score_unit).options(num_cpus=1, max_retries=2)
