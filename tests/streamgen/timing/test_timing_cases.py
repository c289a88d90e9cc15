"""Issue 28's hand-made cases: simultaneous arrivals, empty regenerations, ties, exact skipped prefixes."""

from __future__ import annotations

import pytest

from analysis import simulate
from analysis.simulate import one_setting
from streamgen.timing.costmodel import LinearCost
from streamgen.timing.policies import Policy, StepFacts, evaluate

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


def test_simulate_p95_and_p50_differ_by_hand() -> None:
    # one one-step script (arrival 1.0, wall W = 0.5·2 + 0.01·50 = 1.5 s, base B = 3.0 s); spread 0, so all
    # four users submit at 1.0 and queue first come first served (ties by user): waits W, 2W, 3W, 4W
    w, b = COST.cost(2, 50), 3.0
    script = simulate.Script((_s(1.0, 2, 50, 0, 0, 2),), b)
    rows = {r.policy: r for r in simulate.sweep([script], [4], COST, reps=1, seed=0, spread_s=0.0)}
    # numpy's linear quantile over the sorted waits x0..x3: position q·3, so p50 between x1 and x2 (2.5·),
    # p95 at 2.85: x2 + 0.85·(x3 − x2) = 3.85·
    for policy in ("always", "idle_only", "submitted_first"):
        assert rows[policy].n == 4 and rows[policy].p50_wait_s == pytest.approx(2.5 * w)
        assert rows[policy].p95_wait_s == pytest.approx(3.85 * w) and rows[policy].modelled_job_share == 0
    assert rows["submit_then_decode"].p50_wait_s == pytest.approx(2.5 * b)
    assert rows["submit_then_decode"].p95_wait_s == pytest.approx(3.85 * b)
    assert rows["always"].utilisation == pytest.approx(1.0)  # busy 4W from the first arrival to the last end


def test_a_step_after_a_modelled_step_verifies_the_modelled_draft() -> None:
    # step 4's recorded draft was cut to 3 tokens (step 3's recorded answer held 5): after a modelled step 3
    # it is given that step's own 5-token answer, not the recorded 3-token draft
    steps = [_s(1.0, 2, 20 + 0 + 1, 0, 0, 2), _s(1.5, 2, 10 + 2 + 1, 2, 2, 2), _s(2.0, 1, 10 + 4 + 0, 4, 4, 1),
             _s(9.0, 2, 10 + 3 + 1, 3, 3, 2)]
    out = evaluate(steps, Policy("latest"), COST)
    e1 = 1.0 + COST.cost(2, 21)  # 2.21: steps 2 (1.5) and 3 (2.0) are in; 3 is the newest, 2 is skipped
    # step 3 verifies step 1's 2-token draft: accepts 2, generates 5 − 2 = 3 (3 forwards, 2 more than
    # recorded), feeds step 2's 10 request tokens: 14 + 10 + (2 − 4) + (3 − 1) tokens; it leaves 5 tokens
    e3 = e1 + COST.cost(3, 14 + 10 - 2 + 2)
    # step 4 (at 9.0) verifies those 5 tokens: accepts 3, generates 5 − 3 = 2 (2 forwards as recorded),
    # feeds 5 − 3 = 2 draft tokens more than recorded: 16 tokens, modelled (recorded work: 14)
    assert [r.step for r in out.ran] == [1, 3, 4] and out.skipped == (2,)
    assert [r.modelled for r in out.ran] == [False, True, True]
    assert [r.end_s for r in out.ran] == pytest.approx([e1, e3, 9.0 + COST.cost(2, 16)])
