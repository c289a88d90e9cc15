"""Work shared across acceptance rules: one example's base run and first stream step, run once.

Neither depends on the acceptance rule: the base run never verifies anything, and the first stream
step has no draft yet. Cells that differ only in acceptance/τ (same model, benchmark, decode settings
and example) therefore share them: :class:`SharedExample` runs the base run at most once, the first
stream step at most once, and continues each rule's stream from a copy of the session as it stood
after step 1 (:func:`fork_session`). Each rule's :class:`~streamgen.stream.PairOutcome` is what a
separate ``run_pair`` would give (same answers, same forward counts); the shared runs' wall clocks
are those of the one run that executed them. ``forwards_executed`` counts the model calls actually
made, so the saving shows in the results (``runs.forwards_executed``; docs/accounting.md).

Run order: the caller asks for each rule's pair in turn with its own ``base_first``; the base runs
when the first base-first pair asks for it, so calling the stream-first pairs first keeps every
pair's recorded order true (its stream ran before / after the base) with the base adjacent to both.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import torch

from streamgen.acceptance_rules import AcceptanceRule, Param
from streamgen.decoding.base import Decoder, Generation, StepResult, StreamSession
from streamgen.stream import PairOutcome, StreamRequest, check_request, draft_texts


def fork_session(session: StreamSession, decoder: Decoder) -> StreamSession:
    """An independent copy of a stream session's state (KV caches, previous request) that shares the
    decoder (model, tokenizer, meter) with the original: advancing one never moves the other."""
    with torch.inference_mode():  # the caches hold inference tensors
        return copy.deepcopy(session, memo={id(decoder): decoder})


@dataclass(frozen=True)
class Executed:
    """What one pair call actually ran: model calls and their time inside forwards."""

    forwards: int = 0
    forward_wall_s: float = 0.0

    def plus(self, gen: Generation) -> Executed:
        return Executed(self.forwards + gen.forwards, self.forward_wall_s + gen.meter.forward_wall_s)


class SharedExample:
    """One example's base run and first stream step, shared by ``uses`` acceptance rules' pairs."""

    def __init__(self, decoder: Decoder, request: StreamRequest, uses: int = 1) -> None:
        check_request(decoder, request)
        self.decoder, self.request, self._uses = decoder, request, uses
        self._base: Generation | None = None
        self._first: StepResult | None = None
        self._after_first: StreamSession | None = None  # pristine: every rule forks from it

    def pair(self, rule: AcceptanceRule, *, base_first: bool) -> tuple[PairOutcome, Executed]:
        """This rule's paired outcome and the work this call executed (shared runs count once)."""
        done = Executed()
        if base_first:
            base, done = self._base_run(done)
            steps, done = self._stream(rule, done)
        else:
            steps, done = self._stream(rule, done)
            base, done = self._base_run(done)
        outcome = PairOutcome(base, steps, "base_first" if base_first else "stream_first", self.request,
                              getattr(self.decoder, "min_residual_forwards", None),
                              drafts=draft_texts(self.decoder, steps))
        return outcome, done

    def _base_run(self, done: Executed) -> tuple[Generation, Executed]:
        if self._base is None:
            self._base = self.decoder.generate(self.request.messages())
            done = done.plus(self._base)
        return self._base, done

    def _session_after_first(self, done: Executed) -> tuple[StepResult, StreamSession, Executed]:
        """Step 1 (run once) and a session positioned after it: a fork while other rules still need it."""
        if self._first is None:
            session = self.decoder.open_stream()
            self._first = session.step(self.request.messages(1), (), _NoDraft())
            self._after_first, done = session, done.plus(self._first.answer)
        self._uses -= 1
        assert self._after_first is not None
        if self._uses > 0:
            return self._first, fork_session(self._after_first, self.decoder), done
        session, self._after_first = self._after_first, None  # the last rule takes the original
        return self._first, session, done

    def _stream(self, rule: AcceptanceRule, done: Executed) -> tuple[tuple[StepResult, ...], Executed]:
        first, session, done = self._session_after_first(done)
        steps = [first]
        try:
            for i in range(2, len(self.request.segments) + 1):
                steps.append(session.step(self.request.messages(i), steps[-1].answer.token_ids, rule))
                done = done.plus(steps[-1].answer)
        finally:
            session.close()
        return tuple(steps), done


class _NoDraft:
    """Step 1's rule: there is no draft, so a family that consults a rule there fails loudly (sharing
    step 1 across rules would then be wrong)."""

    name: ClassVar[str] = "no-draft"  # never registered: no cell names it
    params: ClassVar[Mapping[str, Param]] = MappingProxyType({})
    needs_margins = False

    def passes(self, draft_token: int, argmax_token: int, prob: float, margin: float | None = None) -> bool:
        raise AssertionError("the first stream step has no draft; no acceptance rule applies")

    def guarded(self, margin: float | None) -> bool:
        raise AssertionError("the first stream step has no draft; no tie guard applies")


def run_shared(decoder: Decoder, request: StreamRequest, rules: Sequence[AcceptanceRule],
               base_first: Sequence[bool]) -> list[tuple[PairOutcome, Executed]]:
    """Every rule's pair for one example (in the given order), sharing the base run and step 1."""
    shared = SharedExample(decoder, request, uses=len(rules))
    return [shared.pair(rule, base_first=bf) for rule, bf in zip(rules, base_first, strict=True)]
