"""Typing timelines, drafting policies and the cost model, with every expected figure by hand.

The constructed example: four steps whose recorded wall times obey the cost model exactly
(0.5 s per forward + 0.01 s per token fed), arriving at 10 characters per second.
"""

from __future__ import annotations

import math

import pytest

from streamgen.config import ConfigError, GridConfig, TypingConfig, validate_typing
from streamgen.timing.costmodel import CostModelError, LinearCost, fit_cost_model
from streamgen.timing.policies import Policy, StepFacts, evaluate, policies_of
from streamgen.timing.timeline import PrefixCounts, TypingModel, arrival_times, prefix_counts

COST = LinearCost(a_s=0.5, b_s=0.01)


def _step(arrival: float, forwards: int, tokens: int, draft_in: int, accepted: int, generated: int) -> StepFacts:
    return StepFacts(arrival, COST.cost(forwards, tokens), forwards, tokens, draft_in, accepted, generated)


def _example(rate: float) -> list[StepFacts]:
    """prefix_chars 10, 20, 30, 40; request tokens fed by the verify forwards 20, 10, 10, 10."""
    t = [c / rate for c in (10, 20, 30, 40)]
    return [
        _step(t[0], forwards=4, tokens=20 + 0 + 3, draft_in=0, accepted=0, generated=4),  # wall 2.23
        _step(t[1], forwards=3, tokens=10 + 4 + 2, draft_in=4, accepted=2, generated=3),  # wall 1.66
        _step(t[2], forwards=1, tokens=10 + 5 + 0, draft_in=5, accepted=5, generated=1),  # wall 0.65
        _step(t[3], forwards=2, tokens=10 + 6 + 1, draft_in=6, accepted=3, generated=2),  # wall 1.17
    ]


# ------------------------------------------------------------------------------------------
# timelines
# ------------------------------------------------------------------------------------------

SEGS = ["One two.\n", "```\nx=1\n```\n", "Three."]  # 9 + 12 + 6 characters; the block is chars 9..21


def test_prefix_counts_by_hand() -> None:
    assert prefix_counts(SEGS) == [
        PrefixCounts(9, 0, 0),  # no boundary strictly inside "One two.\n"
        PrefixCounts(21, 12, 1),  # the block pasted; the sentence end at 9 lies inside
        PrefixCounts(27, 12, 2),  # boundaries at 9 and 21
    ]


def test_arrivals_with_pauses_and_pasted_code() -> None:
    pasted = arrival_times(SEGS, TypingModel(3.0, sentence_pause_s=0.5, paste_code=True))
    assert pasted == pytest.approx((9 / 3, (21 - 12) / 3 + 0.5, (27 - 12) / 3 + 2 * 0.5))
    typed = arrival_times(SEGS, TypingModel(3.0, sentence_pause_s=0.0, paste_code=False))
    assert typed == pytest.approx((9 / 3, 21 / 3, 27 / 3))  # the t_i = prefix_chars_i / rate


def test_typing_config_validation_lists_every_problem() -> None:
    bad = TypingConfig(chars_per_s=[0.0], sentence_pause_s=-1, policies=["sometimes"], every_k=0,
                       cap_tokens=0, live_policy="cap")
    problems = validate_typing(bad, live=True)
    assert len(problems) == 6, problems
    two_rates = validate_typing(TypingConfig(chars_per_s=[4, 10], live_policy="latest"), live=True)
    assert any("one rate" in p for p in two_rates)
    assert validate_typing(GridConfig().typing, live=True) == []


# ------------------------------------------------------------------------------------------
# policies
# ------------------------------------------------------------------------------------------


def test_every_segment_by_hand() -> None:
    out = evaluate(_example(10.0), Policy("every"))  # arrivals 1, 2, 3, 4
    e1 = 1 + 2.23  # step 1 starts at t1
    e2 = max(2, e1) + 1.66
    e3 = max(3, e2) + 0.65
    e4 = max(4, e3) + 1.17
    assert [r.end_s for r in out.ran] == pytest.approx([e1, e2, e3, e4])
    assert out.wait_s == pytest.approx(e4 - 4) and out.backlog_s == pytest.approx(e3 - 4)
    assert not out.keeps_up and out.skipped == () and not out.modelled  # e1 = 3.23 > t2 = 2


def test_every_segment_keeps_up_when_typing_is_slow() -> None:
    out = evaluate(_example(2.0), Policy("every"))  # arrivals 5, 10, 15, 20
    assert [r.start_s for r in out.ran] == pytest.approx([5, 10, 15, 20])
    assert out.keeps_up and out.backlog_s == 0
    assert out.wait_s == pytest.approx(1.17)  # keeping up, the user waits the residual step alone


def test_latest_only_skips_a_stale_step_and_models_the_next() -> None:
    out = evaluate(_example(10.0), Policy("latest"), COST)
    e1 = 1 + 2.23  # 3.23: segments 2 (t=2) and 3 (t=3) have arrived; 2 never started → skipped
    # step 3 verifies step 1's 4-token draft: accepts min(5, 4) = 4, regenerates 6 − 4 = 2 (one more than
    # recorded), and its verify forward also feeds step 2's 10 request tokens
    forwards3, tokens3 = 1 + 1, 15 + 10 + (4 - 5) + 1
    e3 = e1 + COST.cost(forwards3, tokens3)
    e4 = max(4, e3) + 1.17  # step 4 gets a 6-token draft as recorded: its work is the recorded one
    assert [r.step for r in out.ran] == [1, 3, 4] and out.skipped == (2,)
    assert [r.modelled for r in out.ran] == [False, True, False] and out.modelled
    assert [r.end_s for r in out.ran] == pytest.approx([e1, e3, e4])
    assert out.wait_s == pytest.approx(e4 - 4) and not out.keeps_up


def test_every_kth_segment_by_hand() -> None:
    out = evaluate(_example(10.0), Policy("every_k", k=2), COST)
    # step 2 at t2 = 2 with no draft: regenerates 2 + 3 = 5 tokens, also feeds step 1's 20 request tokens
    e2 = 2 + COST.cost(5, 16 + 20 + (0 - 4) + 2)
    # step 4 verifies step 2's 5-token draft (recorded 6) and feeds step 3's 10 request tokens
    e4 = max(4, e2) + COST.cost(2, 17 + 10 + (5 - 6))
    assert [r.step for r in out.ran] == [2, 4] and out.skipped == ()
    assert [r.end_s for r in out.ran] == pytest.approx([e2, e4])
    assert out.wait_s == pytest.approx(e4 - 4) and not out.keeps_up  # e2 = 4.84 > t4 = 4
    assert out.policy == "every_2"


def test_capped_drafts_by_hand() -> None:
    out = evaluate(_example(10.0), Policy("cap", cap_tokens=3), COST)
    e1 = 1 + COST.cost(4 - 1, 23 - 1)  # stops at 3 tokens: one decode forward fewer
    e2 = max(2, e1) + COST.cost(3 - 2, 16 + (3 - 4) - 2)  # 3-token draft, accepts 2, generates 1
    # accepts 3 of 3, already at the cap: generates 0 where 1 was recorded, but that 1 came from the verify
    # forward itself, so still 1 forward, and the tokens fed change by the shorter draft alone: 15 − 2 = 13
    e3 = max(3, e2) + COST.cost(1, 15 + (3 - 5))
    e4 = max(4, e3) + COST.cost(2, 17 + (3 - 6))  # the final step is never capped
    assert [r.end_s for r in out.ran] == pytest.approx([e1, e2, e3, e4])
    assert all(r.modelled for r in out.ran)
    assert out.wait_s == pytest.approx(e4 - 4) and out.backlog_s == 0  # e3 = 3.98 < t4 = 4


def test_policies_without_a_cost_model_say_so() -> None:
    with pytest.raises(ValueError, match="cost model"):
        evaluate(_example(10.0), Policy("latest"))
    with pytest.raises(ConfigError, match="cap_tokens"):
        Policy("cap")
    assert [p.label for p in policies_of(TypingConfig())] == ["every", "latest", "every_2", "cap_32"]


# ------------------------------------------------------------------------------------------
# cost model
# ------------------------------------------------------------------------------------------


def test_cost_model_recovers_an_exact_law() -> None:
    steps = _example(10.0)
    fit = fit_cost_model([s.forwards for s in steps], [s.tokens_fed for s in steps], [s.wall_s for s in steps])
    assert fit.a_s == pytest.approx(0.5) and fit.b_s == pytest.approx(0.01)
    assert fit.r2 is not None and math.isclose(fit.r2, 1.0) and fit.n_rows == 4


def test_cost_model_clips_negative_coefficients_and_refuses_too_little_data() -> None:
    # time falls as forwards rise: the per-forward cost clips to 0, the per-token cost is refitted alone
    forwards, tokens, wall = [1, 1, 2], [10, 20, 10], [1.0, 2.0, 0.5]
    fit = fit_cost_model(forwards, tokens, wall)
    assert fit.a_s == 0 and fit.b_s == pytest.approx((10 * 1.0 + 20 * 2.0 + 10 * 0.5) / (10**2 + 20**2 + 10**2))
    with pytest.raises(CostModelError, match="at least two"):
        fit_cost_model([1, 2], [10, 20], [1.0, 2.0])  # proportional rows
