"""One browser tab: its growing request, its stream session, the steps the policy ran, its answer.

Text updates register completed segments (every segment but the one still being typed; all of them
on submit) with their arrival times; a drafter task asks :func:`streamgen.demo.schedule.next_prefix`
what to draft and runs that step of the tab's own :class:`StreamSession` on the model worker. After
submit it runs the final (residual) step on the submitted text, whatever the policy had drafted
(also when the submit added no segment), then the base decode of the same request on the same model
(submit-then-decode, measured). The page reads :meth:`DemoSession.snapshot` (pushed on every change).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

from streamgen.acceptance_rules import AcceptanceRule
from streamgen.decoding.base import Decoder, Generation, StepResult, common_prefix_length, draft_fingerprint
from streamgen.demo.schedule import next_prefix
from streamgen.demo.worker import ModelWorker
from streamgen.requests.segment import Segmenter
from streamgen.stream import RequestError, StreamRequest, check_request
from streamgen.timing.policies import Policy

log = logging.getLogger(__name__)

MAX_STEPS_SHOWN = 50


class DemoInputError(ValueError):
    """An update the tab cannot take (too long, a flood, after submit); ``status`` is the HTTP code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class StepView:
    """One stream step as the page shows it (texts decoded on the model thread)."""

    step: int  # 1-based prefix index
    segments: int  # segments arrived when it ran
    final: bool
    draft_tokens_in: int
    accepted_tokens: int
    generated_tokens: int
    forwards: int
    tokens_fed: int
    wall_s: float
    kept_text: str  # the accepted leading run of the incoming draft
    thrown_text: str  # the rest of the incoming draft, thrown away
    new_text: str  # what this step generated after the kept run
    draft_in_id: str  # digest of the incoming draft's tokens: equals the previous step's answer_id
    answer_id: str  # digest of the draft this step leaves


@dataclass(frozen=True)
class Finished:
    """The submitted request's answer and the costs the page compares."""

    answer: str
    answer_tokens: tuple[int, ...]
    residual_forwards: int
    residual_wall_s: float
    wait_s: float  # submit → complete answer (queueing and the residual step)
    base_answer_tokens: tuple[int, ...]
    base_forwards: int
    base_wall_s: float  # plain submit-then-decode, measured on the same model right after


class Ran(NamedTuple):
    view: StepView
    answer: Generation


@dataclass(frozen=True)
class Limits:
    max_chars: int
    max_updates_per_s: float


class DemoSession:
    """The state of one tab; mutated only on the event loop (model work goes to the worker)."""

    def __init__(self, sid: str, worker: ModelWorker, segmenter: Segmenter, rule: AcceptanceRule,
                 policy: Policy, limits: Limits, clock: Callable[[], float] = time.perf_counter) -> None:
        self.sid, self.worker, self.segmenter, self.rule, self.policy = sid, worker, segmenter, rule, policy
        self.limits, self.clock = limits, clock
        self.stream = worker.decoder.open_stream()
        self.origin = clock()
        self.last_seen = self.origin
        self.segments: list[str] = []  # completed segments
        self.arrivals: list[float] = []  # their arrival times, s after the session opened
        self.last = 0  # the last prefix drafted
        self.draft: tuple[int, ...] = ()
        self.steps: list[StepView] = []
        self.submitted_at: float | None = None
        self.finished: Finished | None = None
        self.message: str | None = None
        self._final: Generation | None = None
        self.status = "typing"  # typing | submitted | done | error | released
        self.version = 0
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._updates: deque[float] = deque()
        self._task = asyncio.get_running_loop().create_task(self._drive(), name=f"demo-drafter-{sid}")

    # -- input ------------------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock() - self.origin

    def _admit(self, text: str, submit: bool) -> None:
        now = self.clock()
        self.last_seen = now
        self._refuse_if_closed()
        while self._updates and now - self._updates[0] > 1.0:
            self._updates.popleft()
        if not submit and len(self._updates) >= self.limits.max_updates_per_s:  # a submit is never a flood
            raise DemoInputError(f"too many updates: more than {self.limits.max_updates_per_s:g} per second; "
                                 "slow down (the page sends at most one update at a time)", 429)
        self._updates.append(now)
        if len(text) > self.limits.max_chars:
            raise DemoInputError(f"the request is {len(text)} characters; this demo takes at most "
                                 f"{self.limits.max_chars} (max_chars=)", 413)

    def _refuse_if_closed(self) -> None:
        if self.status in ("submitted", "done", "released"):
            raise DemoInputError(f"this request was already {self.status}: press New request to start another", 409)

    async def update(self, text: str, *, submit: bool = False) -> None:
        """Register the text typed so far; on ``submit`` its last segment completes the request."""
        self._admit(text, submit)
        segs = list(self.segmenter(text))
        if submit and not text.strip():
            raise DemoInputError("the request is empty: type a request before submitting", 400)
        if segs:
            await self._check_fits(segs)
        self._refuse_if_closed()  # again: a submit may have landed while this update was checked
        done = segs if submit else segs[:-1]
        keep = common_prefix_length(self.segments, done)
        del self.segments[keep:], self.arrivals[keep:]
        self.last = min(self.last, keep)
        now = self._now()
        for seg in done[keep:]:
            self.segments.append(seg)
            self.arrivals.append(now)
        if self.message and self.status == "typing":
            self.message = None
        if submit:
            self.submitted_at, self.status = now, "submitted"
        self._wake.set()
        self._notify()

    async def _check_fits(self, segs: Sequence[str]) -> None:
        try:
            await self.worker.run(check_request, self.worker.decoder, StreamRequest(self.sid, (), tuple(segs)))
        except RequestError as exc:
            self.message = "; ".join(exc.problems).replace(f"example {self.sid!r}: ", "")
            self._notify()
            raise DemoInputError(self.message, 413) from exc

    # -- drafting ---------------------------------------------------------------------------

    async def _drive(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while (j := next_prefix(self.policy, self.last, self._now(), self.arrivals,
                                        self.submitted_at is not None)) is not None:
                    await self._run_step(j)
                if self.submitted_at is not None and self.finished is None:
                    if not (self.steps and self.steps[-1].final):
                        # The policy has nothing left to draft, yet no step ran on the submitted text
                        # as final: the submit added no segment (its text ended where an earlier
                        # update's completed segments did, or it dropped a fragment they held), or it
                        # came while a speculative step of the last prefix ran. The final step runs on
                        # the submitted text anyway, verifying the draft it holds.
                        await self._run_step(len(self.segments))
                    await self._finish()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 — shown on the page and logged, never swallowed
            log.exception("session %s: drafting failed", self.sid)
            self.status, self.message = "error", f"drafting failed: {type(exc).__name__}: {exc}"
            self._notify()

    async def _run_step(self, j: int) -> None:
        segs = tuple(self.segments)
        final = self.submitted_at is not None and j == len(segs)
        view, answer = await self.worker.run(self._step, StreamRequest(self.sid, (), segs), j, final, self.draft)
        self.steps.append(view)
        self.draft = answer.token_ids
        if final:
            self._final = answer
        self.last = j if common_prefix_length(self.segments, segs[:j]) == j else common_prefix_length(self.segments, segs)
        self._notify()

    def _step(self, request: StreamRequest, j: int, final: bool, draft: tuple[int, ...]) -> Ran:
        """On the model thread: one stream step of prefix ``j``, and its texts for the page."""
        result: StepResult = self.stream.step(request.messages(j), draft, self.rule)
        dec: Decoder = self.worker.decoder
        used = draft[: result.draft_tokens_in]
        answer = result.answer
        return Ran(StepView(j, len(request.segments), final, result.draft_tokens_in, result.accepted_tokens,
                        result.generated_tokens, answer.forwards, answer.meter.tokens_fed, answer.wall_s,
                        dec.decode_text(used[: result.accepted_tokens]),
                        dec.decode_text(used[result.accepted_tokens:]),
                        dec.decode_text(answer.token_ids[result.accepted_tokens:]),
                        draft_fingerprint(draft), draft_fingerprint(answer.token_ids)), answer)

    async def _finish(self) -> None:
        assert self.submitted_at is not None and self._final is not None
        final = self._final
        wait_s = self._now() - self.submitted_at
        messages = StreamRequest(self.sid, (), tuple(self.segments)).messages()
        base: Generation = await self.worker.run(self.worker.decoder.generate, messages)
        self.finished = Finished(final.text, final.token_ids, final.forwards, final.wall_s, wait_s,
                                 base.token_ids, base.forwards, base.wall_s)
        self.status = "done"
        self._notify()

    # -- output -----------------------------------------------------------------------------

    def _notify(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, version: int, timeout_s: float) -> None:
        """Return once the snapshot is newer than ``version`` (or after ``timeout_s``)."""
        if self.version != version:
            return
        changed = self._changed
        try:
            await asyncio.wait_for(changed.wait(), timeout_s)
        except TimeoutError:
            return

    def snapshot(self) -> dict[str, object]:
        """What the page shows, as JSON-ready data."""
        spec = [s for s in self.steps if not s.final]
        return {
            "id": self.sid, "version": self.version, "status": self.status, "message": self.message,
            "segments": len(self.segments), "steps_run": len(self.steps),
            "steps": [asdict(s) for s in self.steps[-MAX_STEPS_SHOWN:]],
            "speculative_forwards": sum(s.forwards for s in spec),
            "speculative_wall_s": sum(s.wall_s for s in spec),
            "finished": None if self.finished is None else {
                **asdict(self.finished), "answer_tokens": list(self.finished.answer_tokens),
                "base_answer_tokens": list(self.finished.base_answer_tokens)},
        }

    async def release(self, reason: str) -> None:
        """Stop drafting and drop the cache; the page is told why."""
        self.status, self.message = "released", reason
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self.worker.run(self.stream.close)
        self._notify()
