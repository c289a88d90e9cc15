"""The streaming procedure for one example: the paired base run and stream run (rows: ``jobs.run.rows``).

Base run: decode the complete request from scratch. Stream run: for each prefix i = 1..n of the
request's segments, verify the previous draft in one forward, accept its longest passing leading run,
regenerate the rest (``StreamSession.step``). The *residual* cost is the last step's alone (what the
user waits through after submitting); the *speculative* cost is steps 1..n-1 (work done while typing).
See docs/design.md, 'Accounting', and docs/accounting.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from streamgen.acceptance_rules import AcceptanceRule
from streamgen.config import ConfigError
from streamgen.decoding.base import Decoder, Generation, StepResult
from streamgen.live import LiveSettings, StepTiming, run_stream_live
from streamgen.requests.request import StreamRequest

log = logging.getLogger(__name__)


class RequestError(ConfigError):
    """A request the procedure cannot run (empty, or too long for the model); names the fix."""


@dataclass(frozen=True)
class DraftText:
    """A step's incoming draft decoded: the accepted leading run and the tail thrown away."""

    kept: str
    thrown: str


def draft_texts(decoder: Decoder, steps: tuple[StepResult, ...]) -> tuple[DraftText, ...]:
    """Each step's incoming draft (the previous step's answer; none at the first) split at its accepted
    run, as text: what the results viewer shows. Tokenizer work only, outside every timed span."""
    out: list[DraftText] = []
    draft: tuple[int, ...] = ()
    for st in steps:
        used = draft[: st.draft_tokens_in]
        out.append(DraftText(decoder.decode_text(used[: st.accepted_tokens]),
                             decoder.decode_text(used[st.accepted_tokens:])))
        draft = st.answer.token_ids
    return tuple(out)


@dataclass(frozen=True)
class PairOutcome:
    """The base run and every step of the stream run of one example, with their costs."""

    base: Generation
    steps: tuple[StepResult, ...]
    run_order: str  # 'base_first' | 'stream_first'
    request: StreamRequest | None = None
    min_residual_forwards: int | None = None  # the family's floor (1 autoregressive, 3 ReFusion)
    timing: tuple[StepTiming, ...] | None = None  # live runs: which prefix each step ran, and when
    drafts: tuple[DraftText, ...] | None = None  # each step's incoming draft as text (draft_texts)

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
                       decoder.min_residual_forwards, timing, draft_texts(decoder, steps))
