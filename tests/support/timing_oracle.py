"""An independent oracle for the timing layer: a deliberately simple time-stepped simulator.

A clock advances in fixed ticks of ``TICK`` seconds; at every tick, in this order, a step that ends now
frees the device, what arrives now is seen, and a free device picks its next job by the rule as
docs/timing.md and the module docstrings state it. No event queue, and nothing of
``Policy.next_step``, ``evaluate``, ``Chain``, ``_work`` or ``analysis.simulate`` is used: only the
:class:`StepFacts` dataclass as input and :meth:`LinearCost.cost` as the cost law. Times handed in
should be multiples of ``TICK`` (then ties are exact); others are rounded up to the next tick.

A step's work, from first principles (the autoregressive accounting of docs/design.md, 'Accounting'): a step given a
``d``-token draft accepts ``min(recorded accepted, d)``, regenerates up to the recorded answer length
(capped for a speculative step under ``cap``), makes ``max(1, generated)`` forwards plus whatever the
recorded step made beyond that law (a tie guard's forward), and feeds its request tokens, the draft,
and one token per further forward. Its request tokens are the recorded ones when it follows the step
before it; after skipped steps they are ``request_j − cached_{last+1}`` where the rows record cached
tokens (the state of step ``last`` holds what step ``last + 1`` reused), else every skipped step's
request tokens on top. With corrections (states that are not prefixes, :class:`Texts`) the
request tokens after skipped steps come from the texts: what step ``j``'s text shares from its start
with step ``last``'s is kept, the rest fed. Work equal to the recorded one costs the recorded ``wall_s``; other work costs
the law and is *modelled*.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from streamgen.timing.costmodel import LinearCost
from streamgen.timing.policies import StepFacts

TICK = 1 / 32  # seconds; a binary fraction, so sums of tick multiples are exact floats
LIMIT = 1_000_000  # ticks: a run this long means a bug, not a slow example


def ticks(seconds: float) -> int:
    """``seconds`` on the tick grid (rounded up to the next tick when it is not on it)."""
    return math.ceil(seconds / TICK - 1e-9)


@dataclass(frozen=True)
class Ran:
    step: int
    start_s: float
    end_s: float
    modelled: bool
    answer_tokens: int = 0


@dataclass(frozen=True)
class Schedule:
    """One example under one policy, as the oracle runs it."""

    ran: tuple[Ran, ...]
    skipped: tuple[int, ...]
    wait_s: float
    backlog_s: float
    keeps_up: bool


@dataclass(frozen=True)
class Job:
    """A step's work as the oracle derives it."""

    cost_s: float
    answer_tokens: int
    modelled: bool


def planned(name: str, k: int, n: int) -> list[int]:
    """Steps a policy means to run, time aside: every k-th and the last for every_k, else all."""
    if name == "every_k":
        return [j for j in range(1, n + 1) if j % k == 0 or j == n]
    return list(range(1, n + 1))


@dataclass(frozen=True)
class Texts:
    """Corrections timelines: the text each step sent (one token per character after a ``header`` of
    template tokens), so the oracle reads what a state keeps from the texts themselves, not the rows."""

    states: tuple[str, ...]
    header: int


def request_fed(steps: Sequence[StepFacts], last: int, j: int, texts: Texts | None = None) -> int:
    """Request tokens step ``j``'s verify forward feeds when step ``last`` (0: none) ran before it.

    With ``texts`` (states that need not be prefixes): the state step ``last`` left holds its request;
    step ``j`` keeps the header and the characters both texts share from the start, and feeds the rest."""
    def recorded(m: int) -> int:
        s = steps[m - 1]
        return s.tokens_fed - s.draft_tokens_in - (s.forwards - 1)

    if last == j - 1:
        return recorded(j)
    if texts is not None and last > 0:
        before, now = texts.states[last - 1], texts.states[j - 1]
        shared = next((i for i, (a, b) in enumerate(zip(before, now, strict=False)) if a != b), min(len(before), len(now)))
        return len(now) - shared  # (header + len(now)) − (header + shared)
    after = steps[last]  # step last + 1: its request was recorded from the state step last left
    if steps[j - 1].request_tokens is not None and after.cached_tokens is not None:
        return steps[j - 1].request_tokens - after.cached_tokens
    return sum(recorded(m) for m in range(last + 1, j + 1))


def work(steps: Sequence[StepFacts], j: int, prev: Ran | None, cap: int | None, law: LinearCost,
         texts: Texts | None = None) -> Job:
    """Step ``j``'s work after ``prev`` (the last step run; None: none has run)."""
    s, n = steps[j - 1], len(steps)
    follows_recorded = prev is not None and prev.step == j - 1 and not prev.modelled and cap is None
    draft = s.draft_tokens_in if follows_recorded else (prev.answer_tokens if prev else 0)
    accepted = min(s.accepted_tokens, draft)
    target = s.accepted_tokens + s.generated_tokens
    if cap is not None and j < n:
        target = min(target, cap)
    generated = max(0, target - accepted)
    guard = s.forwards - max(1, s.generated_tokens)  # forwards the recorded step made beyond the law
    forwards = max(1, generated) + guard
    tokens = request_fed(steps, prev.step if prev else 0, j, texts) + draft + forwards - 1
    if (forwards, tokens) == (s.forwards, s.tokens_fed):
        return Job(s.wall_s, accepted + generated, False)
    return Job(law.cost(forwards, tokens), accepted + generated, True)


def pick(name: str, k: int, arrived: list[int], last: int, n: int) -> int | None:
    """What a free device drafts now, given the steps after ``last`` that have arrived."""
    if not arrived:
        return None
    if name == "latest":
        return max(arrived)  # the newest prefix in; older ones never start
    nxt = planned(name, k, n)
    want = next(p for p in nxt if p > last)
    return want if want in arrived else None


CostOf = Callable[[int, Ran | None], Job]


def run_example(arrivals: Sequence[float], name: str, k: int, cost_of: CostOf) -> Schedule:
    """Tick through one example: ``cost_of(step, previous run step)`` gives each job's work."""
    arr, n = [ticks(a) for a in arrivals], len(arrivals)
    ran: list[Ran] = []
    busy_end: int | None = None
    t = 0
    while True:
        assert t < LIMIT, "the oracle ran past its tick limit: a step never became runnable"
        if busy_end is not None and t == busy_end:
            busy_end = None
        last = ran[-1].step if ran else 0
        if busy_end is None:
            if last == n:
                break
            j = pick(name, k, [j for j in range(last + 1, n + 1) if arr[j - 1] <= t], last, n)
            if j is not None:
                job = cost_of(j, ran[-1] if ran else None)
                busy_end = t + max(1, ticks(job.cost_s))
                ran.append(Ran(j, t * TICK, t * TICK + job.cost_s, job.modelled, job.answer_tokens))
        t += 1
    plan = planned(name, k, n)
    skipped = tuple(j for j in plan if j not in {r.step for r in ran})
    on_time = all(ticks(r.end_s) <= arr[next(p for p in plan if p > r.step) - 1] for r in ran if r.step < n)
    return Schedule(tuple(ran), skipped, ran[-1].end_s - arrivals[-1], ran[-1].start_s - arrivals[-1],
                    on_time and not skipped)


def evaluate_example(steps: Sequence[StepFacts], name: str, k: int, cap: int | None,
                     law: LinearCost, texts: Texts | None = None) -> Schedule:
    """The oracle's figure for ``policies.evaluate``: the oracle's own work law for every job."""
    return run_example([s.arrival_s for s in steps], name, k, lambda j, prev: work(steps, j, prev, cap, law, texts))


# ------------------------------------------------------------------------------------------
# K users on one replica (analysis.simulate's policies)
# ------------------------------------------------------------------------------------------


@dataclass
class _U:
    steps: Sequence[StepFacts]
    base_wall_s: float
    offset: int  # ticks
    prev: Ran | None = None
    pending: int | None = None
    pending_since: int = 0
    submitted: int | None = None
    done: int | None = None

    def at(self, j: int) -> int:
        return self.offset + ticks(self.steps[j - 1].arrival_s)


@dataclass
class Shared:
    """What the oracle's replica ends with (the fields of ``SimResult`` it checks)."""

    waits: tuple[float, ...] = ()
    busy_s: float = 0.0
    span_s: float = 0.0
    jobs: int = 0
    modelled_jobs: int = 0
    order: list[tuple[int, int, float]] = field(default_factory=list)  # (user, step, end_s) as jobs started


def _arrive(u: _U, j: int, t: int, policy: str, busy: bool) -> None:
    n = len(u.steps)
    if j == n:
        u.submitted, u.pending = t, None  # submitting drops the queued draft
    elif policy == "submit_then_decode" or (policy == "idle_only" and busy):
        return  # no drafting at all / drafting only on an idle device: this prefix is never drafted
    else:
        u.pending, u.pending_since = j, t  # a newer prefix replaces the queued one


def _next_job(users: list[_U], policy: str) -> tuple[int, int] | None:
    """(user, step): finals first except under always; first come first served, ties by user."""
    finals = [(u.submitted, i, len(u.steps)) for i, u in enumerate(users)
              if u.submitted is not None and u.done is None and (u.prev is None or u.prev.step < len(u.steps))]
    drafts = [(u.pending_since, i, u.pending) for i, u in enumerate(users) if u.pending is not None]
    pool = finals if finals and policy != "always" else finals + drafts
    if not pool:
        return None
    _, i, j = min(pool)
    return i, j


def simulate(scripts: Sequence[tuple[Sequence[StepFacts], float]], offsets: Sequence[float], policy: str,
             law: LinearCost) -> Shared:
    """Tick through K users (user i replays ``scripts[i]`` from ``offsets[i]``) on one replica."""
    users = [_U(steps, base, ticks(o)) for (steps, base), o in zip(scripts, offsets, strict=True)]
    out, running, busy_end, t = Shared(), None, 0, 0
    while any(u.done is None for u in users):
        assert t < LIMIT, "the oracle ran past its tick limit: a user never finished"
        if running is not None and t == busy_end:
            user, step = running
            if step == len(users[user].steps):
                users[user].done = t
            running = None
        for u in users:
            for j in range(1, len(u.steps) + 1):
                if u.at(j) == t:
                    _arrive(u, j, t, policy, running is not None)
        if running is None and (job := _next_job(users, policy)) is not None:
            i, j = job
            u = users[i]
            if j < len(u.steps):
                u.pending = None
            if policy == "submit_then_decode":
                w = Job(u.base_wall_s, 0, False)
                u.prev = Ran(len(u.steps), t * TICK, t * TICK + w.cost_s, False)
            else:
                w = work(u.steps, j, u.prev, None, law)
                u.prev = Ran(j, t * TICK, t * TICK + w.cost_s, w.modelled, w.answer_tokens)
            running, busy_end = (i, j), t + max(1, ticks(w.cost_s))
            out.busy_s += w.cost_s
            out.jobs += 1
            out.modelled_jobs += w.modelled
            out.order.append((i, j, busy_end * TICK))
        t += 1
    out.waits = tuple((u.done - u.submitted) * TICK for u in users if u.done is not None and u.submitted is not None)
    out.span_s = max(u.done for u in users if u.done is not None) * TICK - min(u.at(1) for u in users) * TICK
    return out


def describe(steps: Sequence[StepFacts]) -> str:
    """A timeline as the failure message prints it: one line per recorded step."""
    rows = ["  step  arrival   wall  fwd  fed  draft acc gen  req cached"]
    for i, s in enumerate(steps, start=1):
        rows.append(f"  {i:4d} {s.arrival_s:8.4f} {s.wall_s:6.3f} {s.forwards:4d} {s.tokens_fed:4d} {s.draft_tokens_in:6d}"
                    f" {s.accepted_tokens:3d} {s.generated_tokens:3d} {s.request_tokens!s:>4} {s.cached_tokens!s:>6}")
    return "\n".join(rows)
