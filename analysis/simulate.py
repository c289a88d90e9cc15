"""K users typing at once on one model replica: a seeded discrete-event simulation (docs/timing.md).

    python -m analysis.simulate results/local --users 1,2,4,8 --rate 6.7 --reps 20 --seed 0

Each simulated user replays one recorded example (drawn with the seed) on its typing timeline,
starting at a seeded offset in ``[0, spread)``. One device runs one job at a time, to completion
(no preemption; batching is left out). Jobs are drafts (a prefix, verifying the user's last
finished draft, as :class:`streamgen.timing.policies.Chain` costs it) and finals (the last segment: the
user waits from its arrival to the end of this job). A user's queued draft is replaced by a newer
prefix (latest only per user), and dropped once the user submits. Policies:

- ``always``: drafts and finals in one first-come first-served queue;
- ``idle_only``: a draft is queued only if the device is idle when its segment arrives, else it is
  dropped; finals queue first-come first-served, before queued drafts;
- ``submitted_first``: finals always go before queued drafts;
- ``submit_then_decode``: no drafting; each final costs the recorded base run.

Output: per (K, policy) the p50/p95 wait over all users of all repetitions and the device
utilisation (busy time / time from the first arrival to the last completion).

With ``--population desktop`` (or ``mobile``: :mod:`streamgen.timing.typists`) every simulated user is a
typist drawn from that population instead of one typing at ``--rate``: a draw picks a recorded example
and one of the population's seeded users, who types it with their own speed, inter-key variation and
pauses (the post-hoc population table's arrivals for that user and example, exactly)::

    python -m analysis.simulate results/local --users 1,2,4,8 --population mobile --population-users 200
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import logging
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.population import paragraph_ends
from analysis.render import setting_label
from analysis.tables import connect, sql_text
from analysis.typing_table import example_steps, fit_cost_models, step_facts
from streamgen.config import TYPIST_PRESETS, ConfigError, TypingConfig
from streamgen.timing.costmodel import LinearCost
from streamgen.timing.policies import Chain, StepFacts
from streamgen.timing.timeline import PrefixCounts, TypingModel
from streamgen.timing.typists import Population, population

log = logging.getLogger(__name__)

SIM_POLICIES = ("always", "idle_only", "submitted_first", "submit_then_decode")


@dataclass(frozen=True)
class Script:
    """One recorded example: its steps (arrivals relative to the first keystroke) and base wall time."""

    steps: tuple[StepFacts, ...]
    base_wall_s: float


@dataclass(frozen=True)
class SimResult:
    waits: tuple[float, ...]  # per user, in user order
    busy_s: float
    span_s: float
    modelled_jobs: int
    jobs: int

    @property
    def utilisation(self) -> float:
        return self.busy_s / self.span_s if self.span_s > 0 else 0.0


@dataclass
class _User:
    script: Script
    offset: float
    chain: Chain = field(default_factory=Chain)
    pending: int | None = None  # queued draft step (not started)
    pending_since: float = 0.0
    submitted_at: float | None = None
    done_at: float | None = None

    def arrival(self, j: int) -> float:
        return self.offset + self.script.steps[j - 1].arrival_s

    @property
    def n(self) -> int:
        return len(self.script.steps)


class _Device:
    """The replica: which job to start when free (by policy), and its bookkeeping."""

    def __init__(self, users: list[_User], policy: str, cost: LinearCost | None) -> None:
        self.users, self.policy, self.cost = users, policy, cost
        self.busy_until, self.busy_s, self.jobs, self.modelled = 0.0, 0.0, 0, 0
        self.running: tuple[int, int] | None = None  # (user, step)

    def choose(self) -> tuple[int, int, float] | None:
        """(user, step, release time) of the job to start next, or None."""
        finals = [(u.submitted_at, i, u.n) for i, u in enumerate(self.users)
                  if u.submitted_at is not None and u.done_at is None and u.chain.last < u.n]
        drafts = [(u.pending_since, i, u.pending) for i, u in enumerate(self.users) if u.pending is not None]
        if self.policy in ("submitted_first", "idle_only", "submit_then_decode") and finals:
            return min(finals)[1], min(finals)[2], min(finals)[0]
        pool = [*finals, *drafts]
        if not pool:
            return None
        release, user, step = min(pool)
        return user, step, release

    def start(self, now: float, user: int, step: int) -> None:
        u = self.users[user]
        if step < u.n:
            u.pending = None
        if self.policy == "submit_then_decode":
            cost_s, chain = u.script.base_wall_s, Chain(u.n)
        else:
            work, chain = u.chain.run(u.script.steps, step, self.cost)
            cost_s = work.cost_s
            self.modelled += work.modelled
        self.running, self.busy_until = (user, step), now + cost_s
        self.busy_s += cost_s
        self.jobs += 1
        u.chain = chain

    def finish(self) -> None:
        assert self.running is not None
        user, step = self.running
        if step == self.users[user].n:
            self.users[user].done_at = self.busy_until
        self.running = None


def simulate_once(scripts: Sequence[Script], offsets: Sequence[float], policy: str,
                  cost: LinearCost | None = None) -> SimResult:
    """One run: user i replays ``scripts[i]`` starting at ``offsets[i]``."""
    if policy not in SIM_POLICIES:
        raise ValueError(f"simulation policy {policy!r} is not one of {SIM_POLICIES}")
    users = [_User(s, o) for s, o in zip(scripts, offsets, strict=True)]
    events = [(u.arrival(j), i, j) for i, u in enumerate(users) for j in range(1, u.n + 1)
              if j == u.n or policy != "submit_then_decode"]
    heapq.heapify(events)
    device = _Device(users, policy, cost)
    while events or device.running is not None:
        if device.running is not None and (not events or device.busy_until <= events[0][0]):
            now = device.busy_until
            device.finish()
        else:
            now, i, j = heapq.heappop(events)
            _arrive(users[i], j, now, device)
        while events and events[0][0] <= now:  # all that arrives at this instant is seen before a choice
            _, i, j = heapq.heappop(events)
            _arrive(users[i], j, now, device)
        if device.running is None:
            job = device.choose()
            if job is not None:
                device.start(now, job[0], job[1])
    first = min(u.arrival(1) for u in users)
    last = max(u.done_at for u in users if u.done_at is not None)
    waits = tuple(u.done_at - u.submitted_at for u in users if u.done_at is not None and u.submitted_at is not None)
    return SimResult(waits, device.busy_s, last - first, device.modelled, device.jobs)


def _arrive(u: _User, j: int, now: float, device: _Device) -> None:
    if j == u.n:
        u.submitted_at, u.pending = now, None
    elif device.policy == "idle_only" and device.running is not None:
        return  # drafting only on an idle device: this prefix is never drafted
    else:
        u.pending, u.pending_since = j, now


@dataclass(frozen=True)
class SimRow:
    users: int
    policy: str
    n: int
    p50_wait_s: float
    p95_wait_s: float
    utilisation: float
    modelled_job_share: float


def sweep(scripts: Sequence[Script], users: Sequence[int], cost: LinearCost | None, *, reps: int = 20,
          seed: int = 0, spread_s: float | None = None) -> list[SimRow]:
    """Every K in ``users`` × every policy, ``reps`` seeded repetitions each (the same draws per policy)."""
    if not scripts:
        raise ValueError("no recorded examples to simulate: run a grid first")
    check_sweep(users, reps)
    spread = spread_s if spread_s is not None else statistics.median(s.steps[-1].arrival_s for s in scripts)
    rows = []
    for k in users:
        rng = random.Random(f"{seed}:{k}")
        draws = [([rng.choice(scripts) for _ in range(k)], [rng.uniform(0, spread) for _ in range(k)])
                 for _ in range(reps)]
        for policy in SIM_POLICIES:
            results = [simulate_once(s, o, policy, cost) for s, o in draws]
            waits = np.array([w for r in results for w in r.waits])
            jobs = sum(r.jobs for r in results)
            rows.append(SimRow(k, policy, len(waits), float(np.quantile(waits, 0.5)),
                               float(np.quantile(waits, 0.95)),
                               float(np.mean([r.utilisation for r in results])),
                               sum(r.modelled_jobs for r in results) / jobs if jobs else 0.0))
    return rows


def rows_table(rows: Sequence[SimRow]) -> pa.Table:
    names = list(SimRow.__dataclass_fields__)
    return pa.table({n: [getattr(r, n) for r in rows] for n in names})


def check_sweep(users: Sequence[int], reps: int) -> None:
    """ConfigError naming each bad K (< 1) and a repetition count < 1."""
    problems = [f"--users needs K ≥ 1 users, got {k}: pass e.g. --users 1,2,4" for k in users if k < 1]
    problems += [f"--reps needs ≥ 1 repetition, got {reps}: pass e.g. --reps 20"] if reps < 1 else []
    if problems or not users:
        raise ConfigError(problems or ["--users lists no K: pass e.g. --users 1,2,4"], "bad simulation settings")


def _users(text: str) -> list[int]:
    try:
        return [int(k) for k in text.split(",")]
    except ValueError:
        raise ConfigError([f"--users takes comma-separated integers such as 1,2,4, got {text!r}"],
                          "bad simulation settings") from None


@dataclass(frozen=True)
class SimulationInputs:
    scripts: list  # analysis.simulate.Script per replayed example
    cost: LinearCost | None
    label: str  # which model setting the scripts come from


def simulation_inputs(results_dir: Any, rate: float | None, model: str | None = None,
                      cfg: TypingConfig | None = None, population: Population | None = None) -> SimulationInputs:
    """The replayed examples of one model setting (greedy first) as simulation scripts at ``rate``, or,
    with ``population``, one script per (example, user of the population): :func:`population_scripts`."""
    cfg = cfg or TypingConfig()
    con = connect(results_dir)
    try:
        table = con.sql(sql_text("_typing_inputs")).to_arrow_table()
    finally:
        con.close()
    keep = pc.is_null(table["live_policy"])
    if model is not None:
        keep = pc.and_(keep, pc.fill_null(pc.equal(table["model"], model), False))
    table = table.filter(keep)
    if table.num_rows == 0:
        raise ValueError(f"no replayed examples{f' of model {model}' if model else ''} under {results_dir}")
    picked = one_setting_table(table)
    if population is not None:
        scripts = population_scripts(list(example_steps(picked)), population)
        label = f"{setting_label(picked[0])} · {population_label(population)}"
    elif rate is not None:
        typist = TypingModel(rate, cfg.sentence_pause_s, cfg.paste_code)
        scripts = [Script(tuple(step_facts(steps, typist)), steps[0]["base_wall_s"])
                   for steps in example_steps(picked)]
        label = f"{setting_label(picked[0])} · {rate:g} chars/s"
    else:
        raise ValueError("simulation_inputs needs a typing rate or a population")
    fits = fit_cost_models(picked)
    cost = next(iter(fits.values())) if len(fits) == 1 else None
    return SimulationInputs(scripts, cost, label)


def population_label(population: Population) -> str:
    """Names the preset, its size and seed, so a figure can be reproduced."""
    return f"{population.preset.name} typists ({population.users} users, seed {population.seed})"


def population_scripts(examples: Sequence[list[dict]], population: Population) -> list[Script]:
    """One script per (example, user): the example's recorded steps arriving as that user of
    ``population`` types them (:meth:`Population.arrivals`, keyed by the example id, so a user types an
    example here exactly as in the post-hoc population table). Example after example, users in order,
    so drawing a script uniformly draws an example and a user."""
    scripts = []
    for steps in examples:
        chars = [s["prefix_chars"] for s in steps]
        paragraphs = paragraph_ends(chars, [s.get("arrived_text") for s in steps])
        counts = [PrefixCounts(s["prefix_chars"], s["pasted_chars"], s["sentence_ends"], p)
                  for s, p in zip(steps, paragraphs, strict=True)]
        facts = step_facts(steps, TypingModel(1.0))  # arrivals replaced per user below
        for arrivals in population.arrivals(counts, steps[0]["example_id"]):
            scripts.append(Script(tuple(dataclasses.replace(f, arrival_s=float(a))
                                        for f, a in zip(facts, arrivals, strict=True)), steps[0]["base_wall_s"]))
    return scripts


def one_setting(rows: Sequence[dict]) -> list[dict]:
    """The rows of the first cell setting (greedy first): a variant (plain or adapted), a verifier mode
    or a settings tag is another setting, never pooled with this one."""
    chosen = min(_setting(r) for r in rows)
    return [r for r in rows if _setting(r) == chosen]


SETTING_COLUMNS = ("model", "acceptance", "tau", "variant", "verifier_mode", "settings_tag")


def one_setting_table(table: pa.Table) -> list[dict]:
    """:func:`one_setting` of an Arrow table, choosing in Arrow: only the chosen setting's rows become
    Python dicts (at the study's size every step row as a dict took over 2 GB)."""
    settings = table.select(list(SETTING_COLUMNS)).group_by(list(SETTING_COLUMNS)).aggregate([]).to_pylist()
    chosen = min(_setting(r) for r in settings)
    keep = None
    for column, value in zip(SETTING_COLUMNS, chosen, strict=True):
        col = table[column]
        if pa.types.is_null(col.type):  # a column null in every row (Arrow's null type) compares as typed
            col = col.cast(pa.float64() if column == "tau" else pa.string())
        if column == "tau":
            match = pc.equal(pc.fill_null(col, -1.0), value)
        elif column in ("variant", "verifier_mode", "settings_tag"):
            match = pc.equal(pc.fill_null(col, ""), value)
        else:
            match = pc.fill_null(pc.equal(col, value), False)
        keep = match if keep is None else pc.and_(keep, match)
    return table.filter(keep).to_pylist()


def _setting(r: dict) -> tuple:
    """A row's cell setting, sortable (greedy first, τ ascending; nulls as empty)."""
    return (r["model"], r["acceptance"], -1.0 if r["tau"] is None else r["tau"],
            *("" if r[c] is None else r[c] for c in ("variant", "verifier_mode", "settings_tag")))


def main(argv: Sequence[str] | None = None) -> int:
    from analysis.render import Column, markdown
    from analysis.timing_figures import p95_against_users

    parser = argparse.ArgumentParser(prog="python -m analysis.simulate", description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("--users", default="1,2,4,8", help="comma-separated K values")
    parser.add_argument("--rate", type=float, default=None, help="typing rate, characters per second (default 6.7)")
    parser.add_argument("--population", default=None, choices=TYPIST_PRESETS,
                        help="simulate typists drawn from this preset instead of one rate")
    parser.add_argument("--population-users", type=int, default=200, help="typists drawn from the preset")
    parser.add_argument("--population-seed", type=int, default=0, help="the population's seed")
    parser.add_argument("--model", default=None, help="model to simulate (default: the first in the results)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="output folder (default RESULTS_DIR/report)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        users = _users(args.users)
        check_sweep(users, args.reps)
        pop = (population(args.population, args.population_users, args.population_seed)
               if args.population else None)
    except ConfigError as exc:
        parser.error(str(exc))
    if pop is not None and args.rate is not None:
        parser.error("--rate and --population both set: a population's typists each have their own speed; "
                     "drop --rate")
    rate = None if pop is not None else (args.rate if args.rate is not None else 6.7)
    inputs = simulation_inputs(args.results_dir, rate, args.model, population=pop)
    rows = sweep(inputs.scripts, users, inputs.cost, reps=args.reps, seed=args.seed)
    out = args.out or args.results_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    table = rows_table(rows)
    import pyarrow.csv as pacsv

    pacsv.write_csv(table, out / "simulation.csv")
    fig = p95_against_users(table, out / "simulation-p95-wait.png", inputs.label)
    cols = [Column("users", "K", "num"), Column("policy", "Policy"), Column("n", "waits", "num"),
            Column("p50_wait_s", "p50 wait (s)", "num"), Column("p95_wait_s", "p95 wait (s)", "num"),
            Column("utilisation", "utilisation", "share"), Column("modelled_job_share", "modelled jobs", "share")]
    text = (f"## K users on one replica — {inputs.label}, {len(inputs.scripts)} scripts, "
            f"{args.reps} repetitions, seed {args.seed}\n\n" + markdown(table, cols))
    (out / "simulation.md").write_text(text + f"\n![p95 wait]({fig.name})\n")
    print(text)
    print(f"wrote {out / 'simulation.md'}, simulation.csv, {fig.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
