"""Result rows, built on a CPU worker: a decoded shard's answers scored, then every example's pair and
step rows — the one place an outcome (or an error, or an exclusion) becomes rows.

Model actors only decode; :func:`score_unit` runs as a plain Ray task (``num_cpus=1``), so generated
code is executed by the sandbox from a CPU worker and never forks from a model (GPU) process. F1 is
computed in-process. It returns each shard's ``PairRecord`` and ``StepRecord`` rows: one pair row per
example, whether it was scored, excluded (one segment; empty answer) or failed (error type and
traceback).

Every row's identity columns come from one :class:`RowContext` (the cell, the shard and run, the
device); the columns an example's own numbers fill are written once in :func:`outcome_rows`. Which
columns an error or excluded row leaves null is derived from the record dataclasses
(``streamgen.results.records``), not listed by hand: adding a column is a field on the record plus, if an
outcome fills it, one line here. Costs are exactly as docs/design.md, 'Accounting' and 'Records', define them (docs/accounting.md).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import traceback as tb
from dataclasses import dataclass
from typing import Any, NamedTuple

from jobs.grid.shard_tasks import DecodedShard, ExampleResult, ExampleTask, ShardTask
from streamgen.benchmarks import Score
from streamgen.benchmarks.base import score_columns
from streamgen.decoding.base import draft_fingerprint
from streamgen.diagnostics.divergence import divergence
from streamgen.exclusions import empty_answer_reason
from streamgen.results.cells import Cell, settings_json, stable_hash
from streamgen.results.records import SCHEMA_VERSION, PairRecord, StepRecord
from streamgen.stream import PairOutcome, StreamRequest
from streamgen.timing.timeline import prefix_counts

__all__ = ["SHARD_FAILED", "RowContext", "Rows", "ShardRows", "error_rows", "excluded_rows",
           "failed_shard_rows", "outcome_rows", "remote_score_unit", "score_shard", "score_unit", "shard_context"]

log = logging.getLogger(__name__)

SHARD_FAILED = "ShardFailed"
"""``error_type`` of the examples of a shard that used up its attempts (its actor kept dying)."""


@dataclass(frozen=True)
class RowContext:
    """Everything a row carries besides the example's own numbers: the cell, where and when it ran."""

    cell: Cell
    run_id: str
    shard_id: str
    code_version: str
    device: str = "unknown"
    actor_id: str | None = None
    thresholds: tuple[float | None, float | None] = (None, None)  # ReFusion's effective (slot, token)
    numerics: str | None = None  # JSON: the actor's NumericsRecord (streamgen.decoding.numerics)

    def columns(self) -> dict[str, Any]:
        """The identity columns, by record column name (each record takes those it has)."""
        return dict(self._columns)

    @functools.cached_property
    def _columns(self) -> dict[str, Any]:  # once per shard: the cell's id and fingerprint hash its settings
        cell, live = self.cell, self.cell.live
        return {
            "run_id": self.run_id, "shard_id": self.shard_id, "cell_id": cell.cell_id, "model": cell.model.row_model,
            "family": cell.model.family, "variant": cell.model.variant, "benchmark": cell.benchmark.name,
            "benchmark_version": cell.benchmark.version, "quality_metric": cell.benchmark.metric, "acceptance": cell.acceptance, "tau": cell.tau,
            "verifier_mode": cell.verifier_mode, "device": self.device, "actor_id": self.actor_id,
            "schema_version": SCHEMA_VERSION, "code_version": self.code_version,
            "slot_threshold": self.thresholds[0], "token_threshold": self.thresholds[1],
            "cell_fingerprint": cell.fingerprint, "cell_settings": settings_json(cell.settings()),
            "live_policy": live.live_policy if live is not None else None,
            "live_chars_per_s": live.chars_per_s[0] if live is not None else None,
            "tie_guard": cell.tie_guard, "numerics": self.numerics,
            "live_every_k": live.every_k if live is not None and live.live_policy == "every_k" else None,
        }


def shard_context(task: ShardTask, device: str = "unknown", actor_id: str | None = None,
                  thresholds: tuple[float | None, float | None] = (None, None),
                  numerics: str | None = None) -> RowContext:
    """The row context of a shard's rows: its cell, run, shard id and code version, and where it ran."""
    return RowContext(task.cell, task.run_id, task.shard.shard_id, task.code_version, device, actor_id,
                      thresholds, numerics)


class Rows(NamedTuple):
    pair: PairRecord
    steps: list[StepRecord]


def _record(record_type: type, columns: dict[str, Any], values: dict[str, Any], *, nulls: bool = False) -> Any:
    """A record from the identity columns it has plus ``values``; with ``nulls`` every other column is
    null (error and excluded rows), else a column neither gives is an error (unless it has a default)."""
    names = {f.name for f in dataclasses.fields(record_type)}
    unknown = set(values) - names
    assert not unknown, f"{record_type.__name__} has no columns {sorted(unknown)}"
    row = {k: v for k, v in columns.items() if k in names} | values
    if nulls:
        row = dict.fromkeys(names) | row
    return record_type(**row)


def outcome_rows(outcome: PairOutcome, ctx: RowContext, base_score: Score | None = None,
                 stream_score: Score | None = None, scorer_version: str | None = None) -> Rows:
    """The pair row and one step row per segment arrival. Scores (``streamgen.benchmarks.Score``) are
    None until scored; ``scorer_version``: the benchmark scorer's (``Benchmark.scorer_version``). An
    empty answer on either side marks the row excluded (``empty_answer:<side>``, paper §4) but keeps
    its numbers."""
    if outcome.request is None:
        raise ValueError("outcome_rows needs PairOutcome.request (run_pair fills it)")
    req, base, final = outcome.request, outcome.base, outcome.final
    diff = divergence(base, final.answer, final.accepted_tokens)
    pair = _record(PairRecord, ctx.columns(), {
        "example_id": req.example_id, "n_segments": len(req.segments),
        "excluded_reason": empty_answer_reason(base.text, final.answer.text), "error_type": None,
        "error_traceback": None, "base_forwards": base.forwards, "residual_forwards": outcome.residual_forwards,
        "speculative_forwards": outcome.speculative_forwards, "base_wall_s": base.wall_s,
        "residual_wall_s": outcome.residual_wall_s, "speculative_wall_s": outcome.speculative_wall_s,
        "base_forward_wall_s": base.meter.forward_wall_s,
        "residual_forward_wall_s": final.answer.meter.forward_wall_s,
        "base_tokens_fed": base.meter.tokens_fed, "residual_tokens_fed": final.answer.meter.tokens_fed,
        "min_residual_forwards": outcome.min_residual_forwards, "draft_tokens_final": final.draft_tokens_in,
        "accepted_tokens_final": final.accepted_tokens, "base_answer_tokens": len(base.token_ids),
        "stream_answer_tokens": len(final.answer.token_ids), "base_answer": base.text,
        "stream_answer": final.answer.text, "run_order": outcome.run_order,
        **score_columns(base_score, stream_score, scorer_version),
        "first_diff_token": diff.position, "base_margin_at_diff": diff.base_margin,
        "stream_margin_at_diff": diff.stream_margin, "diff_from_draft": diff.from_draft,
        "draft_tokens_after_diff": diff.draft_tokens_after,
        "stream_is_first_draft": outcome.steps[0].answer.token_ids == final.answer.token_ids,
    })
    return Rows(pair, step_rows(outcome, ctx))


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)


def step_rows(outcome: PairOutcome, ctx: RowContext) -> list[StepRecord]:
    """One row per stream step the run took (every prefix, or a live run's drafted prefixes)."""
    assert outcome.request is not None
    req, n, columns = outcome.request, len(outcome.request.segments), ctx.columns()
    counts = prefix_counts(req.segments)
    live = {t.step: t for t in outcome.timing or ()}  # a live run's steps: the prefixes it drafted
    run = list(live) if live else list(range(1, n + 1))
    drafts = outcome.drafts or (None,) * len(run)
    return [_record(StepRecord, columns, {
        "example_id": req.example_id, "step": i, "is_final": i == n, "prefix_chars": len(req.prefix(i)),
        "draft_tokens_in": st.draft_tokens_in, "accepted_tokens": st.accepted_tokens,
        "generated_tokens": st.generated_tokens, "forwards": st.answer.forwards,
        "tokens_fed": st.answer.meter.tokens_fed, "wall_s": st.answer.wall_s,
        "forward_wall_s": st.answer.meter.forward_wall_s, "verify_median_prob": st.extra.get("verify_median_prob"),
        "draft_fingerprint": draft_fingerprint(st.answer.token_ids),
        "pasted_chars": counts[i - 1].pasted_chars, "sentence_ends": counts[i - 1].sentence_ends,
        "arrival_s": live[i].arrival_s if live else None, "start_s": live[i].start_s if live else None,
        "arrived_text": req.state(i)[req.edit(i, before).first_change_char:],
        **_edit_columns(req, before, i),
        "draft_kept_text": d.kept if d else None, "draft_thrown_text": d.thrown if d else None,
        "request_tokens": _int_or_none(st.extra.get("request_tokens")),
        "cached_tokens": _int_or_none(st.extra.get("cached_prefix_tokens")),
    }) for before, i, st, d in zip([0, *run[:-1]], run, outcome.steps, drafts, strict=True)]


def _edit_columns(req: StreamRequest, before: int, i: int) -> dict[str, int | None]:
    """The step row's edit columns: what changed since step ``before`` (null without corrections)."""
    if req.states is None or req.correction_keys is None:
        return {"first_change_char": None, "chars_deleted": None, "chars_inserted": None, "correction_keys": None}
    edit = req.edit(i, before)
    return {"first_change_char": edit.first_change_char, "chars_deleted": edit.chars_deleted,
            "chars_inserted": edit.chars_inserted, "correction_keys": sum(req.correction_keys[before:i])}


def excluded_rows(ctx: RowContext, example_id: str, n_segments: int, reason: str) -> Rows:
    """A row for an example excluded before running (``streamgen.benchmarks.exclusion_reason``, e.g.
    ``single_segment``): reason set, costs null."""
    return Rows(_record(PairRecord, ctx.columns(), {"example_id": example_id, "n_segments": n_segments,
                                                   "excluded_reason": reason}, nulls=True), [])


def error_rows(ctx: RowContext, example_id: str, n_segments: int, error: BaseException | str,
               traceback: str | None = None) -> Rows:
    """A row for an example whose run failed: its error type and traceback, costs null (never 'fast')."""
    if isinstance(error, BaseException):
        error_type = type(error).__name__
        traceback = traceback or "".join(tb.format_exception(error))
    else:
        error_type = error
    return Rows(_record(PairRecord, ctx.columns(), {"example_id": example_id, "n_segments": n_segments,
                                                   "error_type": error_type, "error_traceback": traceback},
                        nulls=True), [])

# --------------------------------------------------------------------------------------------
# A decoded shard's rows: the CPU worker's task
# --------------------------------------------------------------------------------------------


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
    return score_unit((task,), (decoded,))[0]


class _Answer(NamedTuple):
    """One answer to score: the benchmark config it is scored under, its example, its text."""

    benchmark: str  # the benchmark config's hash (:func:`_bench_key`)
    example_id: str
    text: str


def _bench_key(task: ShardTask) -> str:
    return stable_hash(dataclasses.asdict(task.cell.benchmark))


def _scorable(decoded: DecodedShard) -> list[ExampleResult]:
    from streamgen.benchmarks import empty_answer_reason

    return [r for r in decoded.results if r.outcome is not None
            and empty_answer_reason(r.outcome.base.text, r.outcome.stream.text) is None]


def _unit_answers(tasks: tuple[ShardTask, ...], decoded: tuple[DecodedShard, ...]) -> dict[_Answer, Any]:
    """Every distinct (benchmark, example, answer) of a unit, first use first, mapped to its Example.

    The cells of a work unit share one base run per example (``jobs.grid.units``), and a greedy stream
    answer often equals the base answer: each distinct answer is scored once and its verdict shared."""
    distinct: dict[_Answer, Any] = {}
    for task, dec in zip(tasks, decoded, strict=True):
        by_id = {ex.example_id: ex.example for ex in task.examples}
        for r in _scorable(dec):
            for text in (r.outcome.base.text, r.outcome.stream.text):  # type: ignore[union-attr]
                distinct.setdefault(_Answer(_bench_key(task), r.example_id, text), by_id[r.example_id])
    return distinct


def _score_answers(tasks: tuple[ShardTask, ...], distinct: dict[_Answer, Any]) -> dict[_Answer, Score]:
    """Each distinct answer through its benchmark's scorer once (one ``score_many`` per benchmark)."""
    from streamgen.benchmarks import load_benchmark

    configs = {_bench_key(t): t.cell.benchmark for t in tasks}
    verdicts: dict[_Answer, Score] = {}
    for key in dict.fromkeys(a.benchmark for a in distinct):
        keys = [a for a in distinct if a.benchmark == key]
        scores = load_benchmark(configs[key]).score_many([distinct[a] for a in keys], [a.text for a in keys], workers=1)
        verdicts.update(zip(keys, scores, strict=True))
    return verdicts


def score_unit(tasks: tuple[ShardTask, ...], decoded: tuple[DecodedShard, ...]) -> tuple[ShardRows, ...]:
    """The rows of each shard of a work unit (``jobs.grid.units``), in order; each distinct answer of an
    example is scored once for the whole unit (docs/grid.md, "Scoring"), so the sandbox runs once per
    distinct program, not once per acceptance cell. The rows are what scoring every shard alone gives."""
    from streamgen.benchmarks import load_benchmark

    start = time.perf_counter()
    verdicts = _score_answers(tasks, _unit_answers(tasks, decoded))
    share_s = (time.perf_counter() - start) / max(len(tasks), 1)
    reported: set[_Answer] = set()
    out = []
    for task, dec in zip(tasks, decoded, strict=True):
        version = load_benchmark(task.cell.benchmark).scorer_version
        out.append(_shard_rows(task, dec, verdicts, version, share_s, reported))
    return tuple(out)


def _shard_rows(task: ShardTask, decoded: DecodedShard, verdicts: dict[_Answer, Score], scorer_version: str,
                score_s: float, reported: set[_Answer]) -> ShardRows:
    """One shard's rows from the unit's verdicts; a sandbox error is reported by the first shard using it."""
    bench = _bench_key(task)
    score_of = {r.example_id: (verdicts[_Answer(bench, r.example_id, r.outcome.base.text)],  # type: ignore[union-attr]
                               verdicts[_Answer(bench, r.example_id, r.outcome.stream.text)])  # type: ignore[union-attr]
                for r in _scorable(decoded)}
    ctx = shard_context(task, decoded.device, decoded.actor_id, decoded.thresholds, decoded.numerics)
    results = {r.example_id: r for r in decoded.results}
    pairs: list[PairRecord] = []
    steps: list[StepRecord] = []
    for ex in task.examples:
        rows = _rows(ctx, ex, results[ex.example_id], score_of.get(ex.example_id, (None, None)), scorer_version)
        pairs.append(rows.pair)
        steps.extend(rows.steps)
    errors = []
    for r in _scorable(decoded):
        for text in dict.fromkeys((r.outcome.base.text, r.outcome.stream.text)):  # type: ignore[union-attr]
            key = _Answer(bench, r.example_id, text)
            if verdicts[key].status == "error" and key not in reported:
                reported.add(key)
                errors.append(verdicts[key].detail[-500:])
    return ShardRows(tuple(pairs), tuple(steps), sum(p.error_type is not None for p in pairs),
                     sum(p.excluded_reason is not None for p in pairs), score_s, tuple(errors))


def _rows(ctx: RowContext, ex: ExampleTask, result: ExampleResult, scores: tuple[Any, Any],
          scorer_version: str) -> Rows:
    if result.error_type is not None:
        return error_rows(ctx, ex.example_id, ex.n_segments, result.error_type, result.error_traceback)
    if result.outcome is None:
        return excluded_rows(ctx, ex.example_id, ex.n_segments, ex.excluded or "not_run")
    return outcome_rows(result.outcome, ctx, *scores, scorer_version)  # unscored (empty answer): marked excluded there


def failed_shard_rows(task: ShardTask, error: str, device: str = "unknown") -> ShardRows:
    """Error rows for every example of a shard that could not be decoded (its actor kept dying)."""
    ctx = shard_context(task, device)
    pairs = tuple(error_rows(ctx, ex.example_id, ex.n_segments, SHARD_FAILED, error).pair for ex in task.examples)
    return ShardRows(pairs, (), len(pairs), 0, 0.0)


def remote_score_unit(tasks: tuple[ShardTask, ...], decoded: tuple[DecodedShard, ...]) -> Any:
    """Submit :func:`score_unit` as a Ray task on a CPU worker; returns its ref."""
    return _remote_score_unit().remote(tasks, decoded)


@functools.cache
def _remote_score_unit() -> Any:
    import ray

    # max_retries: a worker lost to the OOM killer or a crash is retried; exceptions are not.
    return ray.remote(score_unit).options(num_cpus=1, max_retries=2)
