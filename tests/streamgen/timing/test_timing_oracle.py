"""The timing layer against an independent oracle (tests/support/timing_oracle.py) on generated timelines.

Three checks, each over hypothesis-generated timelines (derandomised, so every run draws the same):
``policies.evaluate`` (every, latest, every_k, cap), ``analysis.simulate.simulate_once`` (K users, its four
policies) and the live run (``run_stream_live`` on a fake clock, a tiny random model, every / latest /
every_k; its expected schedule comes from the oracle, fed only the live steps' measured costs). All times
are multiples of the oracle's tick, so simultaneous arrivals, pasted blocks and ties (a step ending exactly
at an arrival) are exact; each check also asserts that its timelines took those paths. A disagreement
beyond one tick fails and prints the timeline. ``ORACLE_PATHS=1 pytest -s`` prints how often each path was taken.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import accumulate, pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.simulate import SIM_POLICIES, Script, simulate_once
from streamgen.acceptance_rules import Greedy
from streamgen.config import LIVE_POLICIES, POLICIES, model_config
from streamgen.decoding.meter import ForwardMeter
from streamgen.families.registry import load_decoder
from streamgen.live import LiveSettings, run_stream_live
from streamgen.stream import StreamRequest
from streamgen.timing.costmodel import LinearCost
from streamgen.timing.policies import Policy, PolicyOutcome, StepFacts, evaluate
from streamgen.timing.timeline import TypingModel, arrival_times
from tests.support import timing_oracle as oracle
from tests.support.timing_oracle import TICK, Job, Schedule, describe, ticks

LAW = LinearCost(a_s=8 * TICK, b_s=TICK)  # 0.25 s per forward + 1/32 s per token fed: on the tick grid
GAPS = (0, 0, 1, 4, 16, 32, 64, "tie")  # ticks between arrivals; "tie": the previous step's wall exactly


def _run(strategy: st.SearchStrategy[Any], check: Callable[..., set[str]], n: int, need: dict[str, int],
         label: str) -> None:
    """``check`` on ``n`` derandomised draws; then every path in ``need`` must have been taken that often."""
    seen: Counter[str] = Counter()

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def prop(case: tuple[Any, ...]) -> None:
        seen.update(check(*case))

    prop()
    if os.environ.get("ORACLE_PATHS"):
        print(f"\n{label}: {n} draws, paths {dict(sorted(seen.items()))}")
    missing = {f: c for f, c in need.items() if seen[f] < c}
    assert not missing, f"the generated timelines took these paths too rarely: {missing} (seen {dict(seen)})"


@st.composite
def timelines(draw: st.DrawFn, max_steps: int = 6) -> list[StepFacts]:
    """Recorded steps obeying the autoregressive accounting; walls the law ± a few ticks of noise."""
    n, cached_rows = draw(st.integers(1, max_steps)), draw(st.booleans())
    facts: list[StepFacts] = []
    t, answer, request = draw(st.integers(0, 8)), 0, 0
    for i in range(n):
        if i:
            gap = draw(st.sampled_from(GAPS))
            t += ticks(facts[-1].wall_s) if gap == "tie" else gap
        draft = max(0, answer - draw(st.sampled_from((0, 0, 0, 1, 2)))) if i else 0  # 1, 2: a cut draft
        accepted = draw(st.integers(0, draft))
        generated = draw(st.sampled_from((0, 0, 1, 2, 3, 5, 8)))
        forwards = max(1, generated) + draw(st.sampled_from((0, 0, 0, 1)))  # + a tie guard's forward
        cached = 0 if i == 0 else max(0, request - draw(st.integers(0, 3)))
        request += draw(st.integers(1, 12)) + (8 if i == 0 else 0)
        fed = request - cached + draft + forwards - 1
        wall = max(TICK, LAW.cost(forwards, fed) + draw(st.sampled_from((0, 0, -1, 1, 3))) * TICK)
        facts.append(StepFacts(t * TICK, wall, forwards, fed, draft, accepted, generated,
                               request if cached_rows else None, cached if cached_rows else None))
        answer = accepted + generated
    return facts


def _policy(draw: st.DrawFn, names: tuple[str, ...]) -> Policy:
    name = draw(st.sampled_from(names))
    return Policy(name, k=draw(st.integers(2, 3)), cap_tokens=draw(st.integers(1, 6)) if name == "cap" else None)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TICK + 1e-9


def _disagree(what: str, steps: list[StepFacts], label: str, want: Schedule, got: Any) -> str:
    return (f"{what} disagrees with the oracle beyond one tick ({TICK} s) under {label}:\n{describe(steps)}\n"
            f"oracle:  {[(r.step, r.start_s, r.end_s, r.modelled) for r in want.ran]} skipped {want.skipped} "
            f"keeps_up {want.keeps_up} wait {want.wait_s}\n{what}: {got}")


def _agrees(got: PolicyOutcome, want: Schedule) -> bool:
    return ([(r.step, r.modelled) for r in got.ran] == [(r.step, r.modelled) for r in want.ran]
            and all(_close(g.start_s, w.start_s) and _close(g.end_s, w.end_s) for g, w in zip(got.ran, want.ran, strict=True))
            and got.skipped == want.skipped and got.keeps_up == want.keeps_up
            and _close(got.wait_s, want.wait_s) and _close(got.backlog_s, want.backlog_s))


def _paths(steps: list[StepFacts], want: Schedule) -> set[str]:
    """Which of the paths the issue names this timeline took (by the oracle's schedule)."""
    arrivals = [ticks(s.arrival_s) for s in steps]
    paths = {"simultaneous"} if len(set(arrivals)) < len(arrivals) else set()
    paths |= {"tie"} if any(ticks(r.end_s) in arrivals for r in want.ran[:-1]) else set()
    paths |= {"skip"} if want.skipped else set()
    paths |= {"keeps_up"} if want.keeps_up and len(steps) > 1 else set()
    paths |= {"modelled"} if any(r.modelled for r in want.ran) else set()
    paths |= {"zero_generation"} if any(steps[r.step - 1].generated_tokens == 0 for r in want.ran) else set()
    paths |= {"idle"} if any(b.start_s > a.end_s for a, b in pairwise(want.ran)) else set()
    paths |= {"cached" if steps[0].cached_tokens is not None else "uncached"}
    after_modelled = [(a, b) for a, b in pairwise(want.ran) if a.modelled and b.step == a.step + 1]
    paths |= {"after_modelled"} if after_modelled else set()
    paths |= {"after_modelled_cut_draft"} if any(steps[b.step - 1].draft_tokens_in != a.answer_tokens
                                                 for a, b in after_modelled) else set()
    return paths


# ------------------------------------------------------------------------------------------
# one example: policies.evaluate
# ------------------------------------------------------------------------------------------


@st.composite
def evaluate_cases(draw: st.DrawFn) -> tuple[list[StepFacts], Policy]:
    return draw(timelines()), _policy(draw, POLICIES)


def _check_evaluate(steps: list[StepFacts], policy: Policy) -> set[str]:
    want = oracle.evaluate_example(steps, policy.name, policy.k, policy.cap_tokens, LAW)
    got = evaluate(steps, policy, LAW)
    assert _agrees(got, want), _disagree("policies.evaluate", steps, policy.label, want, got)
    return _paths(steps, want) | {policy.name}


def test_evaluate_agrees_with_the_oracle() -> None:
    need = {p: 20 for p in POLICIES} | {"simultaneous": 20, "tie": 10, "skip": 20, "keeps_up": 10, "modelled": 50,
                                        "zero_generation": 30, "idle": 20, "cached": 50, "uncached": 50,
                                        "after_modelled": 5, "after_modelled_cut_draft": 2}
    _run(evaluate_cases(), _check_evaluate, 800, need, "evaluate")


# ------------------------------------------------------------------------------------------
# corrections: states that are not prefixes (docs/typists.md, "Corrections")
# ------------------------------------------------------------------------------------------

HEADER = 8  # template tokens before the user's text; one token per character after them


def _shared(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@st.composite
def corrected_timelines(draw: st.DrawFn, max_steps: int = 7) -> tuple[list[StepFacts], oracle.Texts]:
    """A typist whose typos ('x' for 'a') stay on screen 1..12 characters, then are fixed; each step's row as
    the autoregressive session records it on a one-token-per-character request."""
    ends = list(accumulate(draw(st.integers(1, 6)) for _ in range(draw(st.integers(2, max_steps)))))
    typos, clear = [], 0
    for p in range(ends[-1]):
        if p >= clear and draw(st.integers(0, 2)) == 0:
            clear = min(p + draw(st.integers(1, 12)) + 1, ends[-1])
            typos.append((p, clear))
    states = tuple("".join("x" if any(p == c and p < b < f for p, f in typos) else "a" for c in range(b))
                   for b in ends)
    facts: list[StepFacts] = []
    t, answer = draw(st.integers(0, 8)), 0
    for i, text in enumerate(states):
        if i:
            gap = draw(st.sampled_from(GAPS))
            t += ticks(facts[-1].wall_s) if gap == "tie" else gap
        draft = answer if i else 0
        accepted = draw(st.integers(0, draft))
        generated = draw(st.sampled_from((0, 1, 2, 3, 5)))
        forwards = max(1, generated)
        kept = 0 if i == 0 else HEADER + _shared(states[i - 1], text)
        deleted = 0 if i == 0 else len(states[i - 1]) - (kept - HEADER)
        fed = HEADER + len(text) - kept + draft + forwards - 1
        wall = max(TICK, LAW.cost(forwards, fed) + draw(st.sampled_from((0, 0, -1, 1))) * TICK)
        facts.append(StepFacts(t * TICK, wall, forwards, fed, draft, accepted, generated, HEADER + len(text), kept,
                               deleted))
        answer = accepted + generated
    return facts, oracle.Texts(states, HEADER)


def _check_corrections(steps: list[StepFacts], texts: oracle.Texts, policy: Policy) -> set[str]:
    want = oracle.evaluate_example(steps, policy.name, policy.k, policy.cap_tokens, LAW, texts)
    got = evaluate(steps, policy, LAW)
    assert _agrees(got, want), _disagree("policies.evaluate (corrections)", steps, policy.label, want, got) + (
        f"\nstates {texts.states}")
    paths = {policy.name} | ({"rewrites"} if any(s.chars_deleted for s in steps) else set())
    for a, b in pairwise(want.ran):  # a skip over a fix: step a's typo is gone only at step b
        if b.step > a.step + 1 and HEADER + _shared(texts.states[a.step - 1], texts.states[b.step - 1]) < \
                steps[a.step].cached_tokens:
            paths.add("skip_past_a_fix")
    return paths


@st.composite
def corrections_cases(draw: st.DrawFn) -> tuple[list[StepFacts], oracle.Texts, Policy]:
    steps, texts = draw(corrected_timelines())
    return steps, texts, _policy(draw, POLICIES)


def test_evaluate_agrees_with_the_oracle_on_corrected_text() -> None:
    need = {p: 20 for p in POLICIES} | {"rewrites": 200, "skip_past_a_fix": 40}
    _run(corrections_cases(), _check_corrections, 600, need, "corrections")


# ------------------------------------------------------------------------------------------
# K users: analysis.simulate.simulate_once
# ------------------------------------------------------------------------------------------


@st.composite
def simulate_cases(draw: st.DrawFn) -> tuple[list[list[StepFacts]], list[float], str]:
    k = draw(st.integers(1, 4))
    scripts = [draw(timelines(max_steps=4)) for _ in range(k)]
    offsets = [draw(st.sampled_from((0, 0, 2, 8, 24, 64))) * TICK for _ in range(k)]
    return scripts, offsets, draw(st.sampled_from(SIM_POLICIES))


def _check_simulate(scripts: list[list[StepFacts]], offsets: list[float], policy: str) -> set[str]:
    bases = [ticks(s[-1].wall_s) * 3 * TICK for s in scripts]  # a base run: 3 × the final step's wall
    want = oracle.simulate([(s, b) for s, b in zip(scripts, bases, strict=True)], offsets, policy, LAW)
    got = simulate_once([Script(tuple(s), b) for s, b in zip(scripts, bases, strict=True)], offsets, policy, LAW)
    same = (len(got.waits) == len(want.waits) and all(_close(g, w) for g, w in zip(got.waits, want.waits, strict=True))
            and _close(got.busy_s, want.busy_s) and _close(got.span_s, want.span_s)
            and (got.jobs, got.modelled_jobs) == (want.jobs, want.modelled_jobs))
    timeline = "\n".join(f"user {i} from {o}:\n{describe(s)}" for i, (s, o) in enumerate(zip(scripts, offsets, strict=True)))
    assert same, (f"simulate_once disagrees with the oracle under {policy} (base walls {bases}):\n{timeline}\n"
                  f"oracle: {want}\nsimulate_once: {got}")
    arrivals = [o + s.arrival_s for o, script in zip(offsets, scripts, strict=True) for s in script]
    paths = {policy, f"K={len(scripts)}"}
    paths |= {"same_instant"} if len(set(arrivals)) < len(arrivals) else set()
    paths |= {"modelled"} if want.modelled_jobs else set()
    paths |= {"tie"} if any(end in arrivals for _, _, end in want.order) else set()
    jobs = Counter(u for u, _, _ in want.order)
    if policy != "submit_then_decode" and any(jobs[u] < len(s) for u, s in enumerate(scripts)):
        paths.add("draft_dropped")  # a user's prefix was replaced, dropped on an idle-only busy device or on submit
    return paths


def test_simulate_agrees_with_the_oracle() -> None:
    need = {p: 25 for p in SIM_POLICIES} | {"K=1": 10, "K=4": 20, "same_instant": 50, "modelled": 30,
                                            "draft_dropped": 30, "tie": 20}
    _run(simulate_cases(), _check_simulate, 400, need, "simulate_once")


# ------------------------------------------------------------------------------------------
# the live run on a fake clock
# ------------------------------------------------------------------------------------------

CODE = "```\nx = 1\n```\n"  # a fenced block: pasted, it arrives with the segment before it


@pytest.fixture(scope="module")
def decoder() -> Any:
    return load_decoder(model_config("tiny-llama"), max_new_tokens=8)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


@contextmanager
def fake_clock(decoder: Any) -> Iterator[FakeClock]:
    """A clock that moves only with the live run's sleeps and the model's forwards (LAW per forward)."""
    clock, meter = FakeClock(), decoder.meter
    decoder.meter = ForwardMeter(clock=clock)

    def advance(module: Any, args: Any, kwargs: Any) -> None:
        clock.now += LAW.cost(1, kwargs["input_ids"].shape[1])

    handle = decoder.model.register_forward_pre_hook(advance, with_kwargs=True)
    try:
        yield clock
    finally:
        handle.remove()
        decoder.meter = meter


@st.composite
def live_cases(draw: st.DrawFn) -> tuple[tuple[str, ...], float, Policy]:
    n = draw(st.integers(2, 5))
    segments = [" ".join(["ab"] * draw(st.integers(1, 40))) + "\n"]
    segments += [draw(st.sampled_from((CODE, "cd\n", "ef gh ij kl\n", " ".join(["mn"] * 30) + "\n",
                                         " ".join(["op"] * 150) + "\n")))
                 for _ in range(n - 1)]
    return tuple(segments), draw(st.sampled_from((16.0, 32.0, 64.0))), _policy(draw, LIVE_POLICIES)


def _typed_arrivals(segments: tuple[str, ...], rate: float) -> list[float]:
    """Segment i arrives when its typed characters are in; a code block takes no typing time."""
    typed, out = 0, []
    for s in segments:
        typed += 0 if s == CODE else len(s)
        out.append(typed / rate)
    return out


def _check_live(decoder: Any, segments: tuple[str, ...], rate: float, policy: Policy) -> set[str]:
    arrivals = _typed_arrivals(segments, rate)
    assert list(arrival_times(segments, TypingModel(rate))) == arrivals
    with fake_clock(decoder) as clock:
        live = run_stream_live(decoder, StreamRequest("oracle", (), segments), Greedy(),
                               LiveSettings(policy, TypingModel(rate)), clock=clock, sleep=clock.sleep)
    costs = iter(zip(live.timing, live.steps, strict=True))

    def cost_of(j: int, prev: object) -> Job:  # the live steps' measured walls, taken in order
        timing, step = next(costs, (None, None))
        assert timing is not None and timing.step == j, (
            f"live ran steps {[t.step for t in live.timing]}; the oracle wants step {j} next (arrivals "
            f"{arrivals}, walls {[s.answer.wall_s for s in live.steps]}, {policy.label})")
        return Job(step.answer.wall_s, 0, False)

    want = oracle.run_example(arrivals, policy.name, policy.k, cost_of)
    got = [(t.step, t.start_s) for t in live.timing]
    end = live.timing[-1].start_s + live.steps[-1].answer.wall_s
    assert [r.step for r in want.ran] == [s for s, _ in got] and all(
        _close(s, r.start_s) for (_, s), r in zip(got, want.ran, strict=True)) and _close(end - arrivals[-1], want.wait_s), (
        f"live run disagrees with the oracle under {policy.label} at {rate} chars/s, arrivals {arrivals}:\n"
        f"oracle {[(r.step, r.start_s, r.end_s) for r in want.ran]}\nlive   {got}")
    paths = {policy.name} | ({"skip"} if want.skipped else set())
    paths |= {"simultaneous"} if len(set(arrivals)) < len(arrivals) else set()
    return paths | ({"idle"} if any(b.start_s > a.end_s for a, b in pairwise(want.ran)) else set())


def test_live_run_agrees_with_the_oracle(decoder: Any) -> None:
    need = {p: 2 for p in LIVE_POLICIES} | {"skip": 2, "simultaneous": 2, "idle": 2}
    _run(live_cases(), lambda *case: _check_live(decoder, *case), 60, need, "live")
