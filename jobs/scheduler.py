"""A small work scheduler over Ray actors: model affinity, ``ray.wait`` timeouts, re-queueing.

Why not ``ray.util.ActorPool``: it re-picks a failing actor forever (ray#50313) and knows nothing of
which model an actor holds. Here the driver keeps one queue per model (*group*), a fixed number of
actor slots, and for each slot at most one unit in flight:

- an idle actor takes the next unit of its own model; an actor whose model has no work left is
  retired and its slot restarted with the model that has the most queued units per actor;
- every ``ray.wait`` / ``ray.get`` has a timeout; a unit in flight longer than ``unit_timeout_s``
  gets its actor killed;
- a unit whose actor died (killed, crashed, OOM) or whose follow-up failed goes back to the front
  of its queue with ``attempts + 1``; past ``max_attempts`` it is handed to ``on_failed``;
- a finished unit may return a follow-up ref (its scoring task); the unit counts as done only when
  ``finish`` has run on the follow-up's value, so nothing is written twice or lost.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
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


class Scheduler:
    """Runs :class:`WorkUnit` s on actors made by ``spawn(group)`` through ``submit(actor, unit)``.

    ``after(unit, value) -> ref | None`` starts a follow-up (e.g. scoring) whose value goes to
    ``finish(unit, value)``; with ``after=None`` the actor's value goes to ``finish`` directly.
    ``on_failed(unit, error_text)`` receives units that used up ``max_attempts``.
    """

    def __init__(self, *, spawn: Callable[[str], Any], submit: Callable[[Any, WorkUnit], Any], workers: int,
                 finish: Callable[[WorkUnit, Any], None], on_failed: Callable[[WorkUnit, str], None],
                 after: Callable[[WorkUnit, Any], Any] | None = None, max_attempts: int = 3,
                 poll_s: float = 0.5, unit_timeout_s: float = 1800.0, load_timeout_s: float = 900.0,
                 get_timeout_s: float = 60.0, spawn_min_units: int = 2,
                 on_dispatch: Callable[[Any, WorkUnit], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers} must be ≥ 1")
        self.spawn, self.submit, self.after = spawn, submit, after
        self.finish, self.on_failed, self.on_dispatch = finish, on_failed, on_dispatch
        self.max_attempts, self.poll_s = max_attempts, poll_s
        self.unit_timeout_s, self.load_timeout_s = unit_timeout_s, load_timeout_s
        self.get_timeout_s, self.clock, self.spawn_min_units = get_timeout_s, clock, spawn_min_units
        self.slots = [_Slot() for _ in range(workers)]
        self.queues: dict[str, deque[WorkUnit]] = {}
        self.followups: dict[Any, WorkUnit] = {}
        self.stats = SchedulerStats()

    # ------------------------------------------------------------------ public
    def run(self, units: Sequence[WorkUnit]) -> SchedulerStats:
        for u in units:
            self.queues.setdefault(u.group, deque()).append(u)
        try:
            while self._pending():
                self._fill_slots()
                self._wait_once()
                self._check_timeouts()
        finally:
            for slot in self.slots:
                self._retire(slot)
        return self.stats

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

    def _wait_once(self) -> None:
        refs = [s.ref for s in self.slots if s.unit is not None] + list(self.followups)
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=1, timeout=self.poll_s, fetch_local=False)
        if ready:  # collect everything else already finished, without waiting
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        for ref in ready:
            if ref in self.followups:
                self._followup_ready(ref)
            else:
                self._actor_ready(next(s for s in self.slots if s.ref is not None and s.ref == ref))

    def _actor_ready(self, slot: _Slot) -> None:
        unit, ref = slot.unit, slot.ref
        assert unit is not None
        self.stats.actor_busy_s += self.clock() - slot.since
        slot.unit, slot.ref = None, None
        try:
            value = ray.get(ref, timeout=self.get_timeout_s)
        except RayActorError as exc:
            self.stats.actor_deaths += 1
            log.warning("actor for %s died running %s: %s", slot.group, unit.key, _first_line(exc))
            slot.actor = None  # a dead actor is never picked again; the slot restarts one
            self._requeue(unit, f"actor died: {_first_line(exc)}")
            return
        except (RayError, GetTimeoutError) as exc:
            self._requeue(unit, f"{type(exc).__name__}: {_first_line(exc)}")
            return
        self._advance(unit, value)

    def _advance(self, unit: WorkUnit, value: Any) -> None:
        follow = self.after(unit, value) if self.after is not None else None
        if follow is None:
            self._finish(unit, value)
        else:
            self.followups[follow] = unit

    def _followup_ready(self, ref: Any) -> None:
        unit = self.followups.pop(ref)
        try:
            value = ray.get(ref, timeout=self.get_timeout_s)
        except (RayError, GetTimeoutError) as exc:
            self._requeue(unit, f"follow-up failed: {type(exc).__name__}: {_first_line(exc)}")
            return
        self._finish(unit, value)

    def _finish(self, unit: WorkUnit, value: Any) -> None:
        self.finish(unit, value)
        self.stats.units_done += 1

    def _requeue(self, unit: WorkUnit, error: str) -> None:
        unit.attempts += 1
        unit.errors.append(error)
        if unit.attempts >= self.max_attempts:
            log.error("%s failed %d times; giving up on it: %s", unit.key, unit.attempts, error)
            self.stats.units_failed += 1
            self.on_failed(unit, "\n".join(unit.errors))
            return
        self.stats.requeues += 1
        self.queues.setdefault(unit.group, deque()).appendleft(unit)

    def _check_timeouts(self) -> None:
        now = self.clock()
        for slot in self.slots:
            limit = self.unit_timeout_s + (self.load_timeout_s if slot.fresh else 0.0)
            if slot.unit is not None and now - slot.since > limit:
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
