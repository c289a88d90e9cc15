"""A small work scheduler over Ray actors: model affinity, ``ray.wait`` timeouts, re-queueing.

Why not ``ray.util.ActorPool``: it re-picks a failing actor forever (ray#50313) and knows nothing of
which model an actor holds. Here the driver keeps one queue per model (*group*), a fixed number of
actor slots, and for each slot at most one unit in flight:

- an idle actor takes the next unit of its own model; an actor whose model has no work left is
  retired and its slot restarted with the model that has the most queued units per actor;
- every ``ray.wait`` / ``ray.get`` has a timeout; a unit in flight longer than ``unit_timeout_s``
  gets its actor killed;
- a unit whose actor died (killed, crashed, OOM) or whose follow-up failed goes back to the front
  of its queue with ``attempts + 1``; past ``max_attempts`` it comes out as a ``Failed`` event.
  An attempt that moved the unit forward (``progress(unit)``, the driver's count of the unit's
  spooled examples, grew) is not counted: a unit longer than its allowance finishes over several
  attempts, each resuming where the last stopped, while one that makes no progress still fails;
- the caller pulls what happens as events from :meth:`Scheduler.run`: :class:`Decoded` (an actor's
  value; the caller may hand back a follow-up ref, e.g. its scoring task, with :meth:`Scheduler.follow`),
  :class:`Finished` (the follow-up's value) and :class:`Failed`. A unit with a follow-up counts as done
  only once its ``Finished`` has been handled, so nothing is written twice or lost; a failed follow-up
  sends the unit back to its queue.

- each blocking ``ray.wait`` / ``ray.get`` runs inside ``shield()`` (the driver passes its stop
  signals' ``deferred``): a Python signal handler that raises while Ray's C code is waiting has its
  exception come out as a ``SystemError`` from ``CoreWorker.wait`` (Ray's own signal check runs the
  handler mid-call), so a stop signal is held until the call has returned, at most ``poll_s`` later.

The caller's loop reads top to bottom (``for event in scheduler.run(units)``) and its code is never
called from here, so one example's path enters the driver once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

log = logging.getLogger(__name__)


@dataclass
class WorkUnit:
    """One schedulable piece of work (a shard), bound to an actor group (a model)."""

    key: str
    group: str
    payload: Any
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    timeout_s: float | None = None  # this unit's allowance (shard_size: auto); None: the scheduler's unit_timeout_s
    progress: int = 0  # the highest ``progress(unit)`` seen at a requeue (examples finished and kept)


@dataclass
class _Slot:
    group: str | None = None
    actor: Any = None
    unit: WorkUnit | None = None
    ref: Any = None
    since: float = 0.0
    fresh: bool = False  # the unit's actor was started for it: its clock includes the model load


@dataclass
class SchedulerStats:
    units_done: int = 0
    units_failed: int = 0
    actor_starts: int = 0
    actor_deaths: int = 0
    requeues: int = 0
    actor_busy_s: float = 0.0


@dataclass(frozen=True)
class Decoded:
    """An actor finished ``unit`` with ``value``. Unless the caller hands back a follow-up for it
    (:meth:`Scheduler.follow`) while handling this event, the unit is done."""

    unit: WorkUnit
    value: Any


@dataclass(frozen=True)
class Finished:
    """The follow-up of ``unit`` finished with ``value``: the unit is done."""

    unit: WorkUnit
    value: Any


@dataclass(frozen=True)
class Failed:
    """``unit`` used up its attempts; ``error`` holds every attempt's error, one per line."""

    unit: WorkUnit
    error: str


Event = Decoded | Finished | Failed


class Scheduler:
    """Runs :class:`WorkUnit` s on actors made by ``spawn(group)`` through ``submit(actor, unit)``;
    :meth:`run` yields what happens (:data:`Event`) to the caller's loop."""

    def __init__(self, *, spawn: Callable[[str], Any], submit: Callable[[Any, WorkUnit], Any], workers: int,
                 max_attempts: int = 3, poll_s: float = 0.5, unit_timeout_s: float = 1800.0,
                 load_timeout_s: float = 900.0, get_timeout_s: float = 60.0, spawn_min_units: int = 2,
                 on_dispatch: Callable[[Any, WorkUnit], None] | None = None,
                 progress: Callable[[WorkUnit], int] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 shield: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers} must be ≥ 1")
        self.spawn, self.submit, self.on_dispatch, self.progress = spawn, submit, on_dispatch, progress
        self.max_attempts, self.poll_s = max_attempts, poll_s
        self.unit_timeout_s, self.load_timeout_s = unit_timeout_s, load_timeout_s
        self.get_timeout_s, self.clock, self.spawn_min_units = get_timeout_s, clock, spawn_min_units
        self.shield = shield  # around every blocking Ray call (the module docstring says why)
        self.slots = [_Slot() for _ in range(workers)]
        self.queues: dict[str, deque[WorkUnit]] = {}
        self.followups: dict[Any, WorkUnit] = {}
        self.stats = SchedulerStats()
        self._handed: WorkUnit | None = None  # the unit of the Decoded event being handled

    # ------------------------------------------------------------------ public
    def run(self, units: Sequence[WorkUnit]) -> Generator[Event, None, None]:
        """Run every unit; yield each event as it happens. Leaving the loop early (an exception in the
        caller, ``close()``) kills every actor."""
        for u in units:
            self.queues.setdefault(u.group, deque()).append(u)
        try:
            while self._pending():
                self._fill_slots()
                yield from self._wait_once()
                self._check_timeouts()
        finally:
            for slot in self.slots:
                self._retire(slot)

    def follow(self, unit: WorkUnit, ref: Any) -> None:
        """While handling ``Decoded(unit, …)``: ``unit`` is done only once ``ref`` (e.g. its scoring
        task) has finished and its :class:`Finished` event has been handled."""
        if unit is not self._handed:
            raise ValueError(f"follow({unit.key}) outside the handling of its Decoded event")
        self.followups[ref] = unit
        self._handed = None

    # ------------------------------------------------------------------ loop steps
    def _pending(self) -> bool:
        return any(self.queues.values()) or any(s.unit for s in self.slots) or bool(self.followups)

    def _fill_slots(self) -> None:
        idle = [s for s in self.slots if s.unit is None]
        for slot in idle:  # actors that still have work of their own model keep it (no reload)
            if slot.actor is not None and self.queues.get(slot.group or ""):
                self._dispatch(slot)
        for slot in idle:
            if slot.unit is None and slot.actor is not None:
                self._retire(slot)
        for slot in idle:
            if slot.unit is None and (group := self._neediest_group()) is not None:
                slot.group, slot.actor = group, self.spawn(group)
                self.stats.actor_starts += 1
                log.info("started an actor for %s", group)
                self._dispatch(slot, fresh=True)

    def _neediest_group(self) -> str | None:
        """The group with the most queued units per actor; a group that has actors already gets
        another only while it has ``spawn_min_units`` queued units per actor it would then have
        (a model load is not worth a short tail that the running actors finish soon anyway)."""
        live = Counter(s.group for s in self.slots if s.actor is not None)
        queued = {g: len(q) for g, q in self.queues.items()
                  if q and (live[g] == 0 or len(q) >= self.spawn_min_units * (live[g] + 1))}
        if not queued:
            return None
        return max(queued, key=lambda g: queued[g] / (live[g] + 1))

    def _dispatch(self, slot: _Slot, fresh: bool = False) -> None:
        unit = self.queues[slot.group or ""].popleft()
        slot.unit, slot.ref, slot.since = unit, self.submit(slot.actor, unit), self.clock()
        slot.fresh = fresh
        if self.on_dispatch is not None:
            self.on_dispatch(slot.actor, unit)

    def _wait_once(self) -> Iterator[Event]:
        refs = [s.ref for s in self.slots if s.unit is not None] + list(self.followups)
        if not refs:
            return
        with self.shield():
            ready, _ = ray.wait(refs, num_returns=1, timeout=self.poll_s, fetch_local=False)
            if ready:  # collect everything else already finished, without waiting
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        for ref in ready:
            if ref in self.followups:
                yield from self._followup_ready(ref)
            else:
                yield from self._actor_ready(next(s for s in self.slots if s.ref is not None and s.ref == ref))

    def _actor_ready(self, slot: _Slot) -> Iterator[Event]:
        unit, ref = slot.unit, slot.ref
        assert unit is not None
        self.stats.actor_busy_s += self.clock() - slot.since
        slot.unit, slot.ref = None, None
        try:
            with self.shield():
                value = ray.get(ref, timeout=self.get_timeout_s)
        except RayActorError as exc:
            self.stats.actor_deaths += 1
            log.warning("actor for %s died running %s: %s", slot.group, unit.key, _first_line(exc))
            slot.actor = None  # a dead actor is never picked again; the slot restarts one
            yield from self._requeue(unit, f"actor died: {_first_line(exc)}")
            return
        except (RayError, GetTimeoutError) as exc:
            yield from self._requeue(unit, f"{type(exc).__name__}: {_first_line(exc)}")
            return
        self._handed = unit
        yield Decoded(unit, value)
        if self._handed is unit:  # no follow-up was handed back: done
            self._handed = None
            self.stats.units_done += 1

    def _followup_ready(self, ref: Any) -> Iterator[Event]:
        unit = self.followups.pop(ref)
        try:
            with self.shield():
                value = ray.get(ref, timeout=self.get_timeout_s)
        except (RayError, GetTimeoutError) as exc:
            yield from self._requeue(unit, f"follow-up failed: {type(exc).__name__}: {_first_line(exc)}")
            return
        yield Finished(unit, value)
        self.stats.units_done += 1

    def _requeue(self, unit: WorkUnit, error: str) -> Iterator[Event]:
        done = self.progress(unit) if self.progress is not None else 0
        if done > unit.progress:  # the attempt kept finished examples: the next one resumes after them
            log.warning("%s: %s; %d example(s) finished and kept, so this attempt is not counted", unit.key,
                        error, done)
            unit.progress = done
            unit.errors.append(f"{error} (after {done} finished example(s): not counted)")
        else:
            unit.attempts += 1
            unit.errors.append(error)
        if unit.attempts >= self.max_attempts:
            log.error("%s failed %d times; giving up on it: %s", unit.key, unit.attempts, error)
            self.stats.units_failed += 1
            yield Failed(unit, "\n".join(unit.errors))
            return
        self.stats.requeues += 1
        self.queues.setdefault(unit.group, deque()).appendleft(unit)

    def _check_timeouts(self) -> None:
        now = self.clock()
        for slot in self.slots:
            if slot.unit is None:
                continue
            limit = (slot.unit.timeout_s or self.unit_timeout_s) + (self.load_timeout_s if slot.fresh else 0.0)
            if now - slot.since > limit:
                log.warning("%s ran over %.0f s; killing its actor", slot.unit.key, limit)
                ray.kill(slot.actor, no_restart=True)  # its ref then fails with RayActorError

    def _retire(self, slot: _Slot) -> None:
        if slot.actor is not None and slot.unit is None:
            ray.kill(slot.actor, no_restart=True)
            slot.actor, slot.group = None, None
        elif slot.actor is not None:  # shutting down mid-unit (abort): kill it too
            ray.kill(slot.actor, no_restart=True)
            slot.actor, slot.group, slot.unit, slot.ref = None, None, None, None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
