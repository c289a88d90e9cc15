"""The streaming procedure for one example: the paired base run and stream run, and their records.

Base run: decode the complete request from scratch. Stream run: for each prefix i = 1..n of the
request's segments, verify the previous draft in one forward, accept its longest passing leading run,
regenerate the rest (``StreamSession.step``). The *residual* cost is the last step's alone (what the
user waits through after submitting); the *speculative* cost is steps 1..n-1 (work done while typing).
See DESIGN §2 and docs/accounting.md.
"""

from __future__ import annotations

import hashlib
import logging
import time
import traceback as tb
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from streamgen.chat import Message
from streamgen.config import ConfigError
from streamgen.decoding.acceptance import AcceptanceRule
from streamgen.decoding.base import Decoder, Generation, StepResult
from streamgen.exclusions import empty_answer_reason
from streamgen.live import LiveSettings, StepTiming, run_stream_live
from streamgen.records import SCHEMA_VERSION, PairRecord, StepRecord
from streamgen.timeline import prefix_counts
from streamgen.version import code_version

log = logging.getLogger(__name__)


class RequestError(ConfigError):
    """A request the procedure cannot run (empty, or too long for the model); names the fix."""


@dataclass(frozen=True)
class StreamRequest:
    """One example as the user composes it: fixed history, then the final user turn in segments."""

    example_id: str
    history: tuple[Message, ...]
    segments: tuple[str, ...]
    system_prompt: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.segments)

    def prefix(self, i: int) -> str:
        """Segments 1..i concatenated (``prefix(n)`` is the complete request)."""
        return "".join(self.segments[:i])

    def messages(self, i: int | None = None) -> list[Message]:
        """System prompt (if any) + history + the user turn as it stands after ``i`` segments."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        user = {"role": "user", "content": self.text if i is None else self.prefix(i)}
        return [*system, *(dict(m) for m in self.history), user]


@dataclass(frozen=True)
class PairOutcome:
    """The base run and every step of the stream run of one example, with their costs."""

    base: Generation
    steps: tuple[StepResult, ...]
    run_order: str  # 'base_first' | 'stream_first'
    request: StreamRequest | None = None
    min_residual_forwards: int | None = None  # the family's floor (1 autoregressive, 3 ReFusion)
    timing: tuple[StepTiming, ...] | None = None  # live runs: which prefix each step ran, and when

    @property
    def final(self) -> StepResult:
        return self.steps[-1]

    @property
    def stream(self) -> Generation:
        """The stream run's answer: the last step's draft, with the last step's (residual) cost."""
        return self.final.answer

    @property
    def residual_forwards(self) -> int:
        return self.final.answer.forwards

    @property
    def residual_wall_s(self) -> float:
        return self.final.answer.wall_s

    @property
    def speculative_forwards(self) -> int:
        return sum(s.answer.forwards for s in self.steps[:-1])

    @property
    def speculative_wall_s(self) -> float:
        return sum(s.answer.wall_s for s in self.steps[:-1])

    @property
    def speedup_forwards(self) -> float:
        return self.base.forwards / self.residual_forwards

    @property
    def speedup_wall(self) -> float:
        return self.base.wall_s / self.residual_wall_s if self.residual_wall_s > 0 else float("inf")


def check_request(decoder: Decoder, request: StreamRequest) -> None:
    """Raise :class:`RequestError` for an empty request or one that cannot fit the model's context."""
    if not request.segments or not request.text.strip():
        raise RequestError([f"example {request.example_id!r}: the request is empty; give a non-empty "
                            "request (at least one sentence)"], "empty request")
    max_context = decoder.max_context
    if max_context:
        n = decoder.count_request_tokens(request.messages())
        if n + decoder.max_new_tokens > max_context:
            raise RequestError([f"example {request.example_id!r}: {n} request tokens + {decoder.max_new_tokens} "
                                f"answer tokens exceed the model's context of {max_context}: use a shorter "
                                "request, lower max_new_tokens, or a model with more context"],
                               "request too long")


def run_stream(decoder: Decoder, request: StreamRequest, rule: AcceptanceRule) -> tuple[StepResult, ...]:
    """Replay prefixes 1..n in one session; each step verifies the previous step's draft."""
    session = decoder.open_stream()
    steps: list[StepResult] = []
    draft: tuple[int, ...] = ()
    try:
        for i in range(1, len(request.segments) + 1):
            result = session.step(request.messages(i), draft, rule)
            steps.append(result)
            draft = result.answer.token_ids
    finally:
        session.close()
    return tuple(steps)


def run_pair(decoder: Decoder, request: StreamRequest, rule: AcceptanceRule, *, base_first: bool,
             live: LiveSettings | None = None, clock: Callable[[], float] = time.perf_counter,
             sleep: Callable[[float], None] = time.sleep) -> PairOutcome:
    """Run the base run and the stream run of one example back to back, in the given order.

    With ``live`` the stream run types the request on ``clock`` and drafts by its policy
    (:mod:`streamgen.live`); without it, prefixes 1..n replay back to back."""
    check_request(decoder, request)

    def stream() -> tuple[tuple[StepResult, ...], tuple[StepTiming, ...] | None]:
        if live is None:
            return run_stream(decoder, request, rule), None
        run = run_stream_live(decoder, request, rule, live, clock=clock, sleep=sleep)
        return run.steps, run.timing

    if base_first:
        base = decoder.generate(request.messages())
        steps, timing = stream()
    else:
        steps, timing = stream()
        base = decoder.generate(request.messages())
    log.debug("example %s: base %d forwards, residual %d", request.example_id, base.forwards,
              steps[-1].answer.forwards)
    return PairOutcome(base, steps, "base_first" if base_first else "stream_first", request,
                       decoder.min_residual_forwards, timing)


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordContext:
    """Everything a result row carries besides the example's own numbers."""

    run_id: str
    shard_id: str
    cell_id: str
    model: str
    family: str
    benchmark: str
    benchmark_version: str
    acceptance: str
    tau: float | None
    device: str
    actor_id: str | None = None
    variant: str | None = None
    verifier_mode: str | None = None
    code_version: str = field(default_factory=code_version)
    slot_threshold: float | None = None  # ReFusion's effective thresholds (decoding.per_benchmark applied)
    token_threshold: float | None = None
    cell_fingerprint: str | None = None  # streamgen.cells.cell_fingerprint of the cell
    cell_settings: str | None = None  # streamgen.cells.settings_json of the cell
    live_policy: str | None = None  # live cells only (streamgen.live)
    live_chars_per_s: float | None = None


class Records(NamedTuple):
    pair: PairRecord
    steps: list[StepRecord]


_NULL_COSTS = dict.fromkeys(
    ("base_forwards", "residual_forwards", "speculative_forwards", "base_wall_s", "residual_wall_s",
     "speculative_wall_s", "base_forward_wall_s", "residual_forward_wall_s", "base_tokens_fed",
     "residual_tokens_fed", "min_residual_forwards", "draft_tokens_final", "accepted_tokens_final",
     "base_answer_tokens", "stream_answer_tokens", "base_answer", "stream_answer", "base_quality",
     "stream_quality", "base_score_status", "stream_score_status", "run_order", "sandbox_backend", "sandbox_view"))


def _pair(ctx: RecordContext, example_id: str, n_segments: int, **values: object) -> PairRecord:
    return PairRecord(
        run_id=ctx.run_id, shard_id=ctx.shard_id, cell_id=ctx.cell_id, model=ctx.model, family=ctx.family,
        benchmark=ctx.benchmark, benchmark_version=ctx.benchmark_version, acceptance=ctx.acceptance,
        tau=ctx.tau, example_id=example_id, n_segments=n_segments, variant=ctx.variant,
        verifier_mode=ctx.verifier_mode, device=ctx.device, actor_id=ctx.actor_id,
        schema_version=SCHEMA_VERSION, code_version=ctx.code_version, slot_threshold=ctx.slot_threshold,
        token_threshold=ctx.token_threshold, cell_fingerprint=ctx.cell_fingerprint,
        cell_settings=ctx.cell_settings, live_policy=ctx.live_policy,
        live_chars_per_s=ctx.live_chars_per_s, **values)  # type: ignore[arg-type]


def build_records(outcome: PairOutcome, ctx: RecordContext, base_quality: float | None = None,
                  stream_quality: float | None = None, *, base_score_status: str | None = None,
                  stream_score_status: str | None = None, sandbox_backend: str | None = None,
                  sandbox_view: str | None = None) -> Records:
    """The pair row and one step row per segment arrival, exactly as DESIGN §2/§5 define the costs.

    Scores are None until scored. An empty answer on either side marks the row excluded
    (``empty_answer:<side>``, paper §4) but keeps its numbers.
    """
    if outcome.request is None:
        raise ValueError("build_records needs PairOutcome.request (run_pair fills it)")
    req, base, final = outcome.request, outcome.base, outcome.final
    pair = _pair(
        ctx, req.example_id, len(req.segments), excluded_reason=empty_answer_reason(base.text, final.answer.text),
        error_type=None, error_traceback=None,
        base_forwards=base.forwards, residual_forwards=outcome.residual_forwards,
        speculative_forwards=outcome.speculative_forwards, base_wall_s=base.wall_s,
        residual_wall_s=outcome.residual_wall_s, speculative_wall_s=outcome.speculative_wall_s,
        base_forward_wall_s=base.meter.forward_wall_s, residual_forward_wall_s=final.answer.meter.forward_wall_s,
        base_tokens_fed=base.meter.tokens_fed, residual_tokens_fed=final.answer.meter.tokens_fed,
        min_residual_forwards=outcome.min_residual_forwards, draft_tokens_final=final.draft_tokens_in,
        accepted_tokens_final=final.accepted_tokens, base_answer_tokens=len(base.token_ids),
        stream_answer_tokens=len(final.answer.token_ids), base_answer=base.text, stream_answer=final.answer.text,
        base_quality=base_quality, stream_quality=stream_quality, base_score_status=base_score_status,
        stream_score_status=stream_score_status, run_order=outcome.run_order, sandbox_backend=sandbox_backend,
        sandbox_view=sandbox_view)
    return Records(pair, step_records(outcome, ctx))


def draft_fingerprint(token_ids: tuple[int, ...] | list[int]) -> str:
    """A short hash of a draft's token ids: equal drafts, equal fingerprints (16 hex characters)."""
    return hashlib.sha256(",".join(map(str, token_ids)).encode()).hexdigest()[:16]


def step_records(outcome: PairOutcome, ctx: RecordContext) -> list[StepRecord]:
    assert outcome.request is not None
    req, n = outcome.request, len(outcome.request.segments)
    counts = prefix_counts(req.segments)
    live = {t.step: t for t in outcome.timing or ()}  # a live run's steps: the prefixes it drafted
    run = list(live) if live else list(range(1, n + 1))
    return [
        StepRecord(
            run_id=ctx.run_id, shard_id=ctx.shard_id, cell_id=ctx.cell_id, model=ctx.model,
            benchmark=ctx.benchmark, acceptance=ctx.acceptance, tau=ctx.tau, example_id=req.example_id,
            step=i, is_final=i == n, prefix_chars=len(req.prefix(i)), draft_tokens_in=st.draft_tokens_in,
            accepted_tokens=st.accepted_tokens, generated_tokens=st.generated_tokens, forwards=st.answer.forwards,
            tokens_fed=st.answer.meter.tokens_fed, wall_s=st.answer.wall_s,
            forward_wall_s=st.answer.meter.forward_wall_s,
            verify_median_prob=st.extra.get("verify_median_prob"), verifier_mode=ctx.verifier_mode,
            schema_version=SCHEMA_VERSION, code_version=ctx.code_version, cell_fingerprint=ctx.cell_fingerprint,
            draft_fingerprint=draft_fingerprint(st.answer.token_ids),
            pasted_chars=counts[i - 1].pasted_chars, sentence_ends=counts[i - 1].sentence_ends,
            arrival_s=live[i].arrival_s if live else None, start_s=live[i].start_s if live else None)
        for i, st in zip(run, outcome.steps, strict=True)
    ]


def excluded_records(ctx: RecordContext, example_id: str, n_segments: int, reason: str) -> Records:
    """A row for an example excluded before running (``streamgen.benchmarks.exclusion_reason``, e.g.
    ``single_segment``): reason set, costs null."""
    return Records(_pair(ctx, example_id, n_segments, excluded_reason=reason, error_type=None,
                         error_traceback=None, **_NULL_COSTS), [])


def error_record(ctx: RecordContext, example_id: str, n_segments: int, error: BaseException | str,
                 traceback: str | None = None) -> Records:
    """A row for an example whose run failed: its error type and traceback, costs null (never 'fast')."""
    if isinstance(error, BaseException):
        error_type = type(error).__name__
        traceback = traceback or "".join(tb.format_exception(error))
    else:
        error_type = error
    return Records(_pair(ctx, example_id, n_segments, excluded_reason=None, error_type=error_type,
                         error_traceback=traceback, **_NULL_COSTS), [])

