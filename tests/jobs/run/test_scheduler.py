"""The scheduler on real Ray (num_cpus=2, fake num_gpus=2): affinity, actor death, retries, timeouts."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from jobs.run.actors import actor_options  # noqa: E402
from jobs.run.local_ray import start_ray, stop_ray  # noqa: E402
from jobs.run.scheduler import Decoded, Finished, Scheduler, WorkUnit  # noqa: E402
from jobs.run.stop_signals import RunInterrupted, catching  # noqa: E402
from streamgen.config import RayConfig  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def ray_session(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    os.environ["HOME"] = str(tmp_path_factory.mktemp("home"))  # the bootstrap file goes here
    session = start_ray(RayConfig(num_cpus=2, num_gpus=2, object_store_mb=128), default_num_cpus=2)
    yield
    stop_ray(session)


class Toy:
    """Stands in for a model actor: 'runs' a unit by sleeping; 'crash' kills its process."""

    def __init__(self, group: str) -> None:
        self.group = group

    def run(self, key: str, payload: Any) -> dict[str, Any]:
        if payload == "crash":
            os._exit(1)
        time.sleep(float(payload))
        return {"key": key, "group": self.group, "pid": os.getpid(), "gpus": tuple(ray.get_gpu_ids())}


class Loop:
    """The caller's loop over the scheduler's events, written the way the driver writes it."""

    def __init__(self, sched: Scheduler, after: Any = None) -> None:
        self.sched, self.after = sched, after
        self.done: list[tuple[WorkUnit, Any]] = []
        self.failed: list[tuple[WorkUnit, str]] = []
        self.events: list[str] = []

    def run(self, units: list[WorkUnit]) -> Any:
        for event in self.sched.run(units):
            self.events.append(f"{type(event).__name__} {event.unit.key}")
            if isinstance(event, Decoded):
                if self.after is None:
                    self.done.append((event.unit, event.value))
                else:
                    self.sched.follow(event.unit, self.after(event.unit, event.value))
            elif isinstance(event, Finished):
                self.done.append((event.unit, event.value))
            else:
                self.failed.append((event.unit, event.error))
        return self.sched.stats


def _scheduler(workers: int, *, use_gpu: bool = False, after: Any = None, **kw: Any) -> tuple[Loop, list, list]:
    opts = actor_options(use_gpu=use_gpu, cpus_per_actor=0.5)

    def spawn(group: str) -> Any:
        return ray.remote(Toy).options(**opts).remote(group)

    sched = Scheduler(spawn=spawn, submit=lambda a, u: a.run.remote(u.key, u.payload), workers=workers,
                      poll_s=0.2, get_timeout_s=30, **kw)
    loop = Loop(sched, after)
    return loop, loop.done, loop.failed


def _units(groups: dict[str, int], payload: Any = 0.05) -> list[WorkUnit]:
    return [WorkUnit(f"{g}-{i}", g, payload) for g, n in groups.items() for i in range(n)]


def test_every_unit_once_with_model_affinity() -> None:
    loop, done, failed = _scheduler(1)
    stats = loop.run(_units({"A": 3, "B": 3}))
    assert sorted(u.key for u, _ in done) == sorted(u.key for u in _units({"A": 3, "B": 3}))
    assert not failed
    assert stats.actor_starts == 2  # one load per model, not per unit
    pids = {g: {v["pid"] for u, v in done if u.group == g} for g in "AB"}
    assert len(pids["A"]) == len(pids["B"]) == 1 and pids["A"] != pids["B"]
    assert all(v["group"] == u.group for u, v in done)


def test_killed_actor_mid_run_requeues_its_unit_exactly_once() -> None:
    dispatched = Counter()

    def kill_second(actor: Any, unit: WorkUnit) -> None:
        dispatched["n"] += 1
        if dispatched["n"] == 2:
            ray.kill(actor, no_restart=True)

    loop, done, failed = _scheduler(2, on_dispatch=kill_second)
    units = _units({"A": 4, "B": 2}, payload=0.3)
    stats = loop.run(units)
    keys = [u.key for u, _ in done]
    assert sorted(keys) == sorted(u.key for u in units) and len(set(keys)) == len(keys)
    assert not failed
    assert stats.actor_deaths >= 1 and stats.requeues >= 1
    assert any(u.attempts == 1 and "actor died" in u.errors[0] for u, _ in done)


def test_retries_are_bounded_and_the_rest_finishes() -> None:
    loop, done, failed = _scheduler(1, max_attempts=2)
    units = [WorkUnit("bad", "A", "crash"), *_units({"A": 2})]
    stats = loop.run(units)
    assert [u.key for u, _ in failed] == ["bad"]
    assert failed[0][0].attempts == 2 and "actor died" in failed[0][1]
    assert sorted(u.key for u, _ in done) == ["A-0", "A-1"]
    assert stats.actor_deaths == 2


def test_a_unit_over_its_timeout_gets_its_actor_killed() -> None:
    # The first unit on a fresh actor also gets load_timeout_s for the actor's start and model load.
    loop, done, failed = _scheduler(1, max_attempts=1, unit_timeout_s=2.0, load_timeout_s=8.0)
    loop.run([WorkUnit("slow", "A", 60.0), *_units({"A": 1})])
    assert [u.key for u, _ in failed] == ["slow"]
    assert [u.key for u, _ in done] == ["A-0"]


def test_a_units_own_timeout_replaces_the_schedulers() -> None:
    """shard_size: auto gives each unit a timeout from its estimate (jobs/grid/unit_sizing.py): a unit longer
    than the scheduler's default survives on its own allowance, and one over its own is killed."""
    loop, done, failed = _scheduler(1, max_attempts=1, unit_timeout_s=1.0, load_timeout_s=8.0)
    loop.run([WorkUnit("patient", "A", 12.0, timeout_s=60.0), WorkUnit("impatient", "A", 60.0, timeout_s=2.0),
              *_units({"A": 1})])
    assert [u.key for u, _ in failed] == ["impatient"]  # 2 s + no load allowance: its actor was warm
    assert sorted(u.key for u, _ in done) == ["A-0", "patient"]  # 12 s > 1 s + 8 s: the default would kill it


def test_an_attempt_that_kept_finished_examples_is_not_counted() -> None:
    """A unit longer than its allowance finishes over several attempts when each one keeps finished
    examples (``progress`` grows: the driver counts the unit's spool); one whose progress stops fails
    after max_attempts counted attempts. Here ``long`` times out twice, its progress 1 then 2, and
    finishes at its third try; ``stuck`` times out with its progress stuck at 0."""
    kept = {"long": 0}

    def progress(unit: WorkUnit) -> int:
        if unit.key == "long":
            kept["long"] += 1  # each of its attempts finished one more example
        return kept.get(unit.key, 0)

    def submit(actor: Any, unit: WorkUnit) -> Any:  # ``long`` is quick once two attempts have run out
        quick = unit.key == "long" and len(unit.errors) >= 2
        if quick:  # its last try gets room for a fresh actor's start on a loaded machine (3 s was not always)
            unit.timeout_s = 120.0
        return actor.run.remote(unit.key, 0.05 if quick else 60.0)

    opts = actor_options(use_gpu=False, cpus_per_actor=0.5)
    sched = Scheduler(spawn=lambda g: ray.remote(Toy).options(**opts).remote(g), submit=submit, workers=1,
                      poll_s=0.2, get_timeout_s=30, max_attempts=1, unit_timeout_s=1.0, load_timeout_s=3.0,
                      progress=progress)
    loop = Loop(sched)
    loop.run([WorkUnit("long", "A", None), WorkUnit("stuck", "A", None)])
    [(long, _)] = loop.done
    assert long.key == "long" and long.attempts == 0 and long.progress == 2
    assert len(long.errors) == 2 and all("not counted" in e for e in long.errors)
    [(stuck, error)] = loop.failed
    assert stuck.key == "stuck" and stuck.attempts == 1 and "not counted" not in error


def test_gpu_actors_each_get_their_own_gpu() -> None:
    loop, done, failed = _scheduler(2, use_gpu=True)
    loop.run(_units({"A": 2, "B": 2}, payload=0.5))
    assert not failed
    gpus_by_pid = {v["pid"]: v["gpus"] for _, v in done}
    assert all(len(g) == 1 for g in gpus_by_pid.values())
    concurrent = [g for g in gpus_by_pid.values()]
    assert len(set(concurrent)) == 2, f"two actors at once must hold different GPUs: {gpus_by_pid}"


def test_follow_up_value_is_what_finish_sees() -> None:
    @ray.remote(num_cpus=0.5)
    def double(v: dict[str, Any]) -> str:
        return v["key"] * 2

    loop, done, failed = _scheduler(1, after=lambda u, v: double.remote(v))
    stats = loop.run(_units({"A": 2}))
    assert sorted(v for _, v in done) == ["A-0A-0", "A-1A-1"]
    assert sorted(loop.events) == ["Decoded A-0", "Decoded A-1", "Finished A-0", "Finished A-1"]
    assert stats.units_done == 2  # counted once each, when the follow-up's value was handled


def test_a_failed_follow_up_sends_its_unit_back_to_an_actor() -> None:
    @ray.remote(num_cpus=0.5, max_retries=0)
    def flaky(v: dict[str, Any], fail: bool) -> str:
        if fail:
            raise RuntimeError("scoring broke")
        return v["key"]

    seen: Counter[str] = Counter()

    def after(u: WorkUnit, v: dict[str, Any]) -> Any:
        seen[u.key] += 1
        return flaky.remote(v, seen[u.key] == 1)  # the first follow-up of each unit fails

    loop, done, failed = _scheduler(1, after=after)
    stats = loop.run(_units({"A": 2}))
    assert sorted(v for _, v in done) == ["A-0", "A-1"] and not failed
    assert loop.events.count("Decoded A-0") == 2 and loop.events.count("Finished A-0") == 1  # decoded again
    assert stats.requeues == 2 and stats.units_done == 2
    assert all(u.attempts == 1 and "follow-up failed" in u.errors[0] for u, _ in done)


def test_leaving_the_loop_early_kills_every_actor() -> None:
    sched = Scheduler(spawn=lambda g: ray.remote(Toy).options(num_cpus=0.5).remote(g),
                      submit=lambda a, u: a.run.remote(u.key, u.payload), workers=2, poll_s=0.2)
    with pytest.raises(RuntimeError, match="the caller gave up"):
        for event in sched.run(_units({"A": 2, "B": 2}, payload=0.2)):
            assert isinstance(event, Decoded)
            actors = [s.actor for s in sched.slots]
            raise RuntimeError("the caller gave up")  # e.g. the driver's error budget is spent
    assert all(s.actor is None for s in sched.slots)
    assert all(_dies_soon(actor) for actor in actors if actor is not None)


def _dies_soon(actor: Any, within_s: float = 20.0) -> bool:
    """Calls on ``actor`` fail with RayActorError within ``within_s`` (``ray.kill`` is asynchronous: a
    call made right after it may still run before the kill arrives)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.run.remote("after", 0.0), timeout=within_s)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.2)
    return False


class _CountingShield:
    """``StopSignals.deferred`` that also records when the shielded Ray calls return."""

    def __init__(self, stops: Any) -> None:
        self.stops, self.returned_at = stops, []

    def __call__(self) -> Any:
        import contextlib

        @contextlib.contextmanager
        def block() -> Any:
            with self.stops.deferred():
                yield
                self.returned_at.append(time.monotonic())
        return block()


def test_sigterm_while_ray_waits_is_held_until_the_wait_returns() -> None:
    """Ray's CoreWorker.wait runs Python signal handlers mid-call and turns the handler's exception
    into a SystemError (the CI failure of the bad-day SIGTERM test). Shielded, the signal takes effect
    as RunInterrupted once the wait has returned: its poll_s timeout, not before."""
    poll_s, signal_at = 3.0, 0.3  # a wide margin: a loaded machine may fire the timer late
    with catching() as stops:
        shield = _CountingShield(stops)
        sched = Scheduler(spawn=lambda g: ray.remote(Toy).options(num_cpus=0.5).remote(g),
                          submit=lambda a, u: a.run.remote(u.key, u.payload), workers=1, poll_s=poll_s,
                          shield=shield)
        events = sched.run(_units({"A": 1}, payload=30.0))  # never ready within the test
        sched._fill_slots()  # the actor is up and its unit in flight before the signal
        timer = threading.Timer(signal_at, os.kill, (os.getpid(), signal.SIGTERM))
        t0 = time.monotonic()
        timer.start()
        with pytest.raises(RunInterrupted) as caught:
            next(events)
    assert caught.value.signum == signal.SIGTERM and caught.value.__context__ is None
    assert stops.received == signal.SIGTERM
    assert len(shield.returned_at) == 1  # the one wait ran out its timeout, then the signal took effect
    assert shield.returned_at[0] - t0 >= poll_s - 0.05
    assert all(s.actor is None for s in sched.slots)  # leaving through the exception retired the actor


def test_follow_is_only_for_the_decoded_unit_being_handled() -> None:
    sched = Scheduler(spawn=lambda g: None, submit=lambda a, u: None, workers=1)
    with pytest.raises(ValueError, match="outside the handling of its Decoded event"):
        sched.follow(WorkUnit("x", "A", 0), object())


def test_gpu_options() -> None:
    assert actor_options(use_gpu=True) == {"num_gpus": 1, "num_cpus": 1, "max_restarts": 0,
                                           "scheduling_strategy": "SPREAD"}
    assert actor_options(use_gpu=False, cpus_per_actor=2)["num_cpus"] == 2
