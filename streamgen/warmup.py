"""The untimed warm-up pair: one base + stream run of a short request before any timed pair.

The first model calls in a process pay for CUDA context creation, cuBLAS/cuDNN handles, the
allocator's first blocks and kernel selection; on CPU, the first calls pay for thread pools and
page faults. Whichever timed pair came first would carry that cost in its wall clock. One pair of a
short request, run and discarded, moves it out of every record (docs/accounting.md, "Clean timing").
Its model calls are on no row and in no forward count: callers run it before their first timed pair
and keep nothing from it but :class:`WarmUp`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from streamgen.acceptance_rules import Greedy
from streamgen.decoding.base import Decoder
from streamgen.requests.request import StreamRequest
from streamgen.stream import run_pair

# Two segments: the stream run takes both paths a timed pair takes (a first draft, then verify → accept).
WARMUP_REQUEST = StreamRequest("warm-up", (), ("Write a function that adds two numbers.", " Keep it short."))


@dataclass(frozen=True)
class WarmUp:
    """What the warm-up did: ``pairs`` run (base + stream each), their wall clock and model calls."""

    pairs: int
    wall_s: float
    forwards: int

    def describe(self) -> str:
        """One line for logs and printed reports."""
        return f"warm-up: {self.pairs} pair, {self.wall_s:.2f} s, {self.forwards} forwards, not counted"


def warm_up(decoder: Decoder, request: StreamRequest = WARMUP_REQUEST,
            clock: Callable[[], float] = time.perf_counter) -> WarmUp:
    """Run one untimed base + stream pair of ``request`` on ``decoder`` (greedy) and discard it."""
    start = clock()
    outcome = run_pair(decoder, request, Greedy(), base_first=True)
    forwards = outcome.base.forwards + sum(step.answer.forwards for step in outcome.steps)
    return WarmUp(1, clock() - start, forwards)
