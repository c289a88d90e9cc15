"""The forward meter: every model call a decoder makes, counted with tokens fed and wall time.

A *forward* is one call of the model, whatever the number of tokens fed (docs/design.md, 'Accounting'). Every call a
decoder makes goes through :class:`ForwardMeter`, which counts it, records the tokens fed and the
device-synchronised wall time. Forward counts are exact and deterministic: regression tests pin them.
A leaf module: it imports nothing from the project.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
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


LOG_LIMIT = 8192  # calls a meter's log keeps (the most recent); older ones leave it, the totals keep them


class CallLog(list[ForwardCall]):
    """The most recent model calls, at most ``limit``: an actor's meter lives as long as the actor, and
    a log of every call grew by ~185 bytes a forward (GBs over the study). When full, the older half
    leaves (amortised O(1) per call); ``dropped`` counts them. Readings never use the log."""

    def __init__(self, calls: Iterable[ForwardCall] = (), limit: int = LOG_LIMIT) -> None:
        super().__init__(calls)
        self.limit, self.dropped = limit, 0

    def append(self, call: ForwardCall) -> None:
        super().append(call)
        if len(self) > self.limit:
            n = len(self) - self.limit // 2
            del self[:n]
            self.dropped += n


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
    ``clock`` and ``sync`` are injected so tests can pass a fake clock. ``calls`` is the log of the most
    recent calls (:class:`CallLog`, for inspection; clearing it does not change readings), so the meter's
    memory stays flat however many forwards an actor makes; :meth:`reading` comes from running totals
    kept beside it, so a reading costs the same after a million calls as after one, and gives the very
    numbers summing the log would (the totals add the same values in the same order, from 0).
    ``by_kind`` aggregates every call per kind (calls, tokens fed, seconds).
    """

    clock: Callable[[], float] = time.perf_counter
    sync: Callable[[], None] = _no_sync
    calls: list[ForwardCall] = field(default_factory=CallLog)
    by_kind: dict[str, MeterReading] = field(default_factory=dict, init=False)
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
        seen = self.by_kind.get(record.kind, MeterReading(0, 0, 0))
        self.by_kind[record.kind] = MeterReading(seen.forwards + 1, seen.tokens_fed + record.tokens_fed,
                                                 seen.forward_wall_s + record.wall_s)
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
