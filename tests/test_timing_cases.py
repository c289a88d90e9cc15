"""Issue 28's hand-made cases: simultaneous arrivals, empty regenerations, ties, exact skipped prefixes."""

from __future__ import annotations

import pytest

from analysis import simulate
from analysis.timing import one_setting
from streamgen.costmodel import LinearCost
from streamgen.policies import Policy, StepFacts, evaluate

COST = LinearCost(a_s=0.5, b_s=0.01)


def _s(arrival: float, forwards: int, tokens: int, draft_in: int, accepted: int, generated: int,
       cached: int | None = None) -> StepFacts:
    return StepFacts(arrival, COST.cost(forwards, tokens), forwards, tokens, draft_in, accepted, generated,
                     None, cached)


def test_latest_takes_the_newest_of_simultaneous_arrivals() -> None:
    # mbpp/1-like: the pasted test block arrives with the sentence before it (21.64, 27.01, 27.01)
    steps = [_s(21.64, 3, 30, 0, 0, 3), _s(27.01, 2, 14, 3, 2, 2), _s(27.01, 1, 12, 4, 4, 1)]
    out = evaluate(steps, Policy("latest"), COST)
    e1 = 21.64 + COST.cost(3, 30)
    # step 3 verifies step 1's 3-token draft: accepts 3 of it, generates 5 − 3 = 2 (the verify forward
    # yields the first: 2 forwards), feeds step 2's request tokens (no cached counts: its 14 − 3 − 1 = 10)
    e3 = 27.01 + COST.cost(2, 12 + 10 + (3 - 4) + 1)
    assert [r.step for r in out.ran] == [1, 3] and out.skipped == (2,)
    assert out.ran[1].start_s == pytest.approx(27.01) and out.wait_s == pytest.approx(e3 - 27.01)
    every = evaluate(steps, Policy("every"), COST)
    assert [r.step for r in every.ran] == [1, 2, 3] and out.wait_s < every.wait_s
    assert e1 < 27.01  # step 1 ended before the two arrivals: the device was idle, then took the newest


def test_zero_generation_step_given_a_shorter_draft_costs_two_forwards() -> None:
    # recorded: accepted its whole 6-token draft, generated 0, 1 forward; the final gets a 4-token draft
    steps = [_s(1.0, 5, 25, 0, 0, 4), _s(2.0, 1, 16, 6, 6, 0)]
    out = evaluate(steps, Policy("every"), COST)
    # every: step 2 verifies the recorded draft as recorded: nothing modelled
    assert not out.modelled
    capped = evaluate(steps, Policy("cap", cap_tokens=99), COST)
    # cap keeps step 1's 4-token answer: step 2 accepts 4, generates 2: 2 forwards (not 3), tokens 16 − 2 + 1
    assert capped.ran[1].end_s - capped.ran[1].start_s == pytest.approx(COST.cost(2, 16 + (4 - 6) + 1))


def test_skipped_prefix_uses_the_recorded_cached_tokens() -> None:
    # requests of 30, 40, 50, 60 tokens; each step reuses 26, 36, 46 of the previous state
    steps = [_s(1.0, 1, 30, 0, 0, 1, cached=0), _s(9.0, 1, 40 - 26 + 1, 1, 1, 1, cached=26),
             _s(9.0, 1, 50 - 36 + 1, 1, 1, 1, cached=36), _s(9.0, 1, 60 - 46 + 1, 1, 1, 1, cached=46)]
    out = evaluate(steps, Policy("latest"), COST)
    assert [r.step for r in out.ran] == [1, 4]
    # step 4 after step 1 reuses what step 2 reused (26): it feeds 60 − 26 = 34 request tokens + the draft
    assert out.ran[1].end_s - out.ran[1].start_s == pytest.approx(COST.cost(1, 34 + 1))


def test_keeps_up_is_false_on_a_tie_that_skips_a_step() -> None:
    steps = [StepFacts(1.0, 1.0, 1, 10, 0, 0, 1), _s(2.0, 1, 5, 1, 1, 1), _s(2.0, 1, 5, 1, 1, 1),
             _s(9.0, 1, 5, 1, 1, 1)]
    out = evaluate(steps, Policy("latest"), COST)  # step 1 ends at exactly 2.0, when 2 and 3 arrive
    assert out.ran[0].end_s == 2.0 and out.skipped == (2,) and not out.keeps_up


def test_one_setting_keeps_variants_apart() -> None:
    base = {"model": "m", "acceptance": "greedy", "tau": None, "verifier_mode": None, "settings_tag": None}
    rows = [{**base, "variant": None, "x": 1}, {**base, "variant": "adapted", "x": 2}]
    assert [r["x"] for r in one_setting(rows)] == [1]


@pytest.mark.parametrize("args", [["--users", "0"], ["--reps", "0"]])
def test_simulate_names_the_fix_for_zero_users_or_reps(args: list[str], tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        simulate.main([str(tmp_path), *args])
    assert exc.value.code == 2 and "pass e.g." in capsys.readouterr().err
