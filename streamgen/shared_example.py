"""Work shared across the cells of one example: each distinct run and stream step computed once.

The cells of a work unit (``jobs.grid.units``) differ only in their acceptance rule and, for LLaDA/Dream,
their verifier mode. None of that touches the base run (it never verifies) nor the first stream step (it
has no draft). :class:`SharedExample` runs the base run at most once and every cell's stream through one
:class:`~streamgen.stream_tree.StreamTree`: each distinct stream step is computed once and the cells
fork where their rules keep different runs. A LLaDA/Dream decode of a fully masked buffer (step 1, a
step that keeps nothing, the base run) is remembered per request prefix (:mod:`streamgen.decoding.memo`).
Each cell's :class:`~streamgen.stream.PairOutcome` is what a separate ``run_pair`` would give (same
answers, same forward counts); the shared runs' wall clocks are those of the one run that executed
them. What ran is counted apart (:class:`Executed`, ``runs.forwards_executed``; docs/accounting.md).

Run order: the caller asks for each cell's pair in turn with its own ``base_first``; the base runs when
the first base-first pair asks for it and the streams when the first pair asks for its stream, so
calling the stream-first pairs first keeps every pair's recorded order true of its first computation.
``share=False`` (the grid's ``share_work: false``) remembers no decode; the unit then holds one cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamgen.decoding.base import Decoder, Generation, StepResult
from streamgen.decoding.memo import ZERO, DecodeMemo
from streamgen.decoding.meter import MeterReading
from streamgen.stream import PairOutcome, StreamRequest, check_request, draft_texts
from streamgen.stream_tree import StreamCell, StreamTree, fork_session

__all__ = ["Executed", "SharedExample", "StreamCell", "fork_session", "run_shared"]


@dataclass(frozen=True)
class Executed:
    """What one pair call actually ran: model calls and their time inside forwards."""

    forwards: int = 0
    forward_wall_s: float = 0.0

    def plus(self, ran: MeterReading) -> Executed:
        return Executed(self.forwards + ran.forwards, self.forward_wall_s + ran.forward_wall_s)


class SharedExample:
    """One example's base run and every cell's stream, each distinct computation run once."""

    def __init__(self, cells: Sequence[StreamCell], request: StreamRequest, *, share: bool = True) -> None:
        check_request(cells[0].decoder, request)
        self.memo = DecodeMemo() if share else None
        wrapped: dict[int, Decoder] = {}
        for c in cells:
            with_memo = getattr(c.decoder, "with_memo", None)
            if self.memo is not None and with_memo is not None and id(c.decoder) not in wrapped:
                wrapped[id(c.decoder)] = with_memo(self.memo)
        self.cells = [StreamCell(wrapped.get(id(c.decoder), c.decoder), c.rule) for c in cells]
        self.decoder, self.request = self.cells[0].decoder, request
        self._base: Generation | None = None
        self._tree: StreamTree | None = None
        self._failed: BaseException | None = None

    def pair(self, index: int, *, base_first: bool) -> tuple[PairOutcome, Executed]:
        """Cell ``index``'s paired outcome and the work this call executed (shared work counts once)."""
        done = Executed()
        if base_first:
            base, done = self._base_run(done)
            steps, done = self._stream(index, done)
        else:
            steps, done = self._stream(index, done)
            base, done = self._base_run(done)
        decoder = self.cells[index].decoder
        outcome = PairOutcome(base, steps, "base_first" if base_first else "stream_first", self.request,
                              getattr(decoder, "min_residual_forwards", None), drafts=draft_texts(decoder, steps))
        return outcome, done

    def _saved(self) -> MeterReading:
        return self.memo.saved if self.memo is not None else ZERO

    def _base_run(self, done: Executed) -> tuple[Generation, Executed]:
        if self._base is None:
            before = self._saved()
            self._base = self.decoder.generate(self.request.messages())
            done = done.plus(self._base.meter - (self._saved() - before))
        return self._base, done

    def _stream(self, index: int, done: Executed) -> tuple[tuple[StepResult, ...], Executed]:
        if self._failed is not None:  # the shared computation raised in an earlier cell's pair
            raise self._failed
        if self._tree is None:
            before, self._tree = self._saved(), StreamTree(self.cells, self.request)
            try:
                self._tree.run()
            except Exception as exc:
                self._failed = exc
                raise
            ran = sum((s.answer.meter for s in self._tree.executed), ZERO)
            done = done.plus(ran - (self._saved() - before))
        return tuple(self._tree.steps[index]), done


def run_shared(cells: Sequence[StreamCell], request: StreamRequest, base_first: Sequence[bool], *,
               share: bool = True) -> list[tuple[PairOutcome, Executed]]:
    """Every cell's pair for one example (in the given order), each distinct computation run once."""
    shared = SharedExample(cells, request, share=share)
    return [shared.pair(i, base_first=bf) for i, bf in enumerate(base_first)]
