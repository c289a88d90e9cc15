"""The forward meter: every model call a decoder makes, counted with tokens fed and wall time.

A *forward* is one call of the model, whatever the number of tokens fed (docs/design.md, 'Accounting'). Every call a
decoder makes goes through :class:`ForwardMeter`, which counts it, records the tokens fed and the
device-synchronised wall time. Forward counts are exact and deterministic: regression tests pin them.
A leaf module: it imports nothing from the project.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ForwardCall:
    """One model call: what it was for, how many tokens it fed, how long it took (seconds)."""

    kind: str
    tokens_fed: int
    wall_s: float


@dataclass(frozen=True)
class MeterReading:
    """Cumulative totals of a :class:`ForwardMeter` at one instant."""

    forwards: int
    tokens_fed: int
    forward_wall_s: float

    def __add__(self, other: MeterReading) -> MeterReading:
        return MeterReading(
            self.forwards + other.forwards,
            self.tokens_fed + other.tokens_fed,
            self.forward_wall_s + other.forward_wall_s,
        )

    def __sub__(self, other: MeterReading) -> MeterReading:
        return MeterReading(
            self.forwards - other.forwards,
            self.tokens_fed - other.tokens_fed,
            self.forward_wall_s - other.forward_wall_s,
        )


def _no_sync() -> None:
    return None


def device_synchronizer(device: Any) -> Callable[[], None]:
    """Return a function that blocks until all queued work on ``device`` has finished.

    CUDA kernels run asynchronously: reading the clock without synchronising measures launch time,
    not compute time. On CPU there is nothing to wait for.
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    if dev.type == "mps":
        return torch.mps.synchronize
    return _no_sync


@dataclass
class ForwardMeter:
    """Counts every model call with tokens fed and device-synchronised wall time.

    Use :meth:`call` around each model invocation (``with meter.call("decode", 1): model(...)``).
    ``clock`` and ``sync`` are injected so tests can pass a fake clock. ``calls`` is the log of every
    call (for inspection; clearing it does not change readings); :meth:`reading` comes from running
    totals kept beside it, so a reading costs the same after a million calls as after one, and gives
    the very numbers summing the log would (the totals add the same values in the same order, from 0).
    """

    clock: Callable[[], float] = time.perf_counter
    sync: Callable[[], None] = _no_sync
    calls: list[ForwardCall] = field(default_factory=list)
    _forwards: int = field(default=0, init=False, repr=False)
    _tokens_fed: int = field(default=0, init=False, repr=False)
    _wall_s: float = field(default=0, init=False, repr=False)  # int 0 first, as sum() starts

    def __post_init__(self) -> None:
        for c in self.calls:  # a meter handed an existing log starts from its totals
            self._count(c)

    @contextmanager
    def call(self, kind: str, tokens_fed: int) -> Iterator[None]:
        self.sync()
        start = self.clock()
        yield
        self.sync()
        record = ForwardCall(kind, int(tokens_fed), self.clock() - start)
        self.calls.append(record)
        self._count(record)

    def _count(self, record: ForwardCall) -> None:
        self._forwards += 1
        self._tokens_fed += record.tokens_fed
        self._wall_s += record.wall_s

    def reading(self) -> MeterReading:
        """Cumulative totals since the meter was made: O(1), whatever the number of calls."""
        return MeterReading(forwards=self._forwards, tokens_fed=self._tokens_fed, forward_wall_s=self._wall_s)

    @contextmanager
    def span(self) -> Iterator[Span]:
        """Measure a region end to end (synchronised) and the forwards made inside it."""
        span = Span()
        self.sync()
        start_reading, start = self.reading(), self.clock()
        try:
            yield span
        finally:
            self.sync()
            span.wall_s = self.clock() - start
            span.meter = self.reading() - start_reading


@dataclass
class Span:
    """Filled in when a :meth:`ForwardMeter.span` block exits."""

    wall_s: float = 0.0
    meter: MeterReading = field(default_factory=lambda: MeterReading(0, 0, 0.0))
