"""Every cell's stream of one example, each distinct step computed once (docs/accounting.md, "Shared work").

A stream step's result depends on the session's state, the request prefix, the incoming draft and the
acceptance rule; the rule enters only through the answers it gives the family (``passes`` per draft
position, ``guarded`` where a tie guard is asked, ``needs_margins``). :class:`StreamTree` runs the cells
in lock-step. Cells that have taken the same path so far (same decoder, the same steps) form a group
holding one session; at each step the group's first cell runs the step with a :class:`RecordingRule`,
and every cell whose rule gives the same answers to the same questions takes that result: its step is
the same computation, so its row is what a separate run records. A cell whose rule answers differently
forks there: it runs the step again from a copy of the session as it stood before the step. Step 1 has
no draft, so no verifier runs: cells of both verifier modes share it (``StreamCell.decoder`` differs;
the fork swaps it in), as they share the base run. ``groups`` and ``forks`` record what was shared
(the tests read them); ``executed`` counts the model calls actually made.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from streamgen.acceptance_rules import AcceptanceRule
from streamgen.decoding.base import Decoder, StepResult, StreamSession
from streamgen.requests.request import StreamRequest


def fork_session(session: StreamSession, decoder: Decoder, to: Decoder | None = None) -> StreamSession:
    """An independent copy of a stream session's state (KV caches, previous request) that shares the
    decoder (model, tokenizer, meter) with the original, or runs on ``to`` (the other verifier mode's
    decoder over the same weights): advancing one never moves the other."""
    with torch.inference_mode():  # the caches hold inference tensors
        return copy.deepcopy(session, memo={id(decoder): to or decoder})


class RecordingRule:
    """A rule that answers as ``rule`` does and records every question with its answer, so another rule
    can be asked the same questions (:meth:`agrees`)."""

    def __init__(self, rule: AcceptanceRule) -> None:
        self.rule = rule
        self.name, self.params = rule.name, rule.params
        self.asked: list[tuple[str, tuple[Any, ...], bool]] = []

    @property
    def needs_margins(self) -> bool:
        return self.rule.needs_margins

    def passes(self, draft_token: int, argmax_token: int, prob: float, margin: float | None = None) -> bool:
        answer = self.rule.passes(draft_token, argmax_token, prob, margin)
        self.asked.append(("passes", (draft_token, argmax_token, prob, margin), answer))
        return answer

    def guarded(self, margin: float | None) -> bool:
        answer = self.rule.guarded(margin)
        self.asked.append(("guarded", (margin,), answer))
        return answer

    def agrees(self, other: AcceptanceRule) -> bool:
        """Whether ``other`` gives every recorded question the recorded answer (then a step run with it
        makes the very same computation)."""
        return other.needs_margins == self.rule.needs_margins and all(
            getattr(other, method)(*args) == answer for method, args, answer in self.asked)


@dataclass(frozen=True)
class StreamCell:
    """One cell of the unit as the tree sees it: the decoder its verifier mode uses, its rule."""

    decoder: Decoder
    rule: AcceptanceRule


@dataclass(frozen=True)
class SharedStep:
    """A step computed once for ``cells`` (indices into the tree's cells)."""

    step: int
    cells: tuple[int, ...]


@dataclass
class _Group:
    cells: list[int]
    session: StreamSession
    decoder: Decoder
    draft: tuple[int, ...] = ()


@dataclass
class StreamTree:
    """The streams of ``cells`` over one request, computed by :meth:`run` (once)."""

    cells: Sequence[StreamCell]
    request: StreamRequest
    steps: list[list[StepResult]] = field(default_factory=list)
    groups: list[SharedStep] = field(default_factory=list)  # every computed step, with the cells it served
    forks: list[tuple[int, tuple[tuple[int, ...], ...]]] = field(default_factory=list)  # (step, subgroups)
    executed: list[StepResult] = field(default_factory=list)  # the step results computed, once each

    def run(self) -> None:
        self.steps = [[] for _ in self.cells]
        first = self.cells[0].decoder
        groups = [_Group(list(range(len(self.cells))), first.open_stream(), first)]
        try:
            for i in range(1, len(self.request.segments) + 1):
                groups = [g for group in groups for g in self._advance(group, i)]
        finally:
            for g in groups:
                g.session.close()

    def _advance(self, group: _Group, i: int) -> list[_Group]:
        """Step ``i`` for one group: by decoder when a draft is verified, then by what the rules answer."""
        by_decoder: dict[int, list[int]] = {}
        for c in group.cells:  # with no draft no verifier runs: the modes share the step
            by_decoder.setdefault(id(self.cells[c].decoder) if group.draft else 0, []).append(c)
        parts = sorted(by_decoder.values(), key=lambda cs: self.cells[cs[0]].decoder is group.decoder)
        out: list[_Group] = []
        for n, cells in enumerate(parts):  # the part on the group's own decoder (if any) comes last
            decoder = self.cells[cells[0]].decoder if group.draft else group.decoder
            own = n == len(parts) - 1 and decoder is group.decoder
            session = group.session if own else fork_session(group.session, group.decoder, decoder)
            if n == len(parts) - 1 and not own:
                group.session.close()
            out += self._step(_Group(cells, session, decoder, group.draft), i)
        if len(out) > 1:
            self.forks.append((i, tuple(tuple(g.cells) for g in out)))
        return out

    def _step(self, group: _Group, i: int) -> list[_Group]:
        """Run step ``i`` once per distinct answer pattern among the group's rules."""
        pending, out = list(group.cells), []
        while pending:
            alone = len(pending) == 1
            session = group.session if alone else fork_session(group.session, group.decoder)
            rule = RecordingRule(self.cells[pending[0]].rule)
            # a RecordingRule answers as its rule does; it carries name and params per instance, which the
            # Protocol declares as class variables
            result = session.step(self.request.messages(i), group.draft, cast(AcceptanceRule, rule))
            same = [c for c in pending if c == pending[0] or rule.agrees(self.cells[c].rule)]
            pending = [c for c in pending if c not in same]
            self.executed.append(result)
            self.groups.append(SharedStep(i, tuple(same)))
            for c in same:
                self.steps[c].append(result)
            out.append(_Group(same, session, group.decoder, result.answer.token_ids))
            if not alone and not pending:
                group.session.close()  # the pristine copy served its last fork
        return out
