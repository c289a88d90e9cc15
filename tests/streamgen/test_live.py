"""The live stream run on an injected fake clock agrees with the post-hoc policy figures.

The fake clock moves only when a model forward runs (0.5 s + 0.01 s per token fed, through a real
forward pre-hook on a tiny random model) or when the live run sleeps, so every recorded ``wall_s``
obeys the cost law exactly and the live and post-hoc timelines can be compared to the last bit.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobs.run.rows import outcome_rows
from streamgen.acceptance_rules import Greedy
from streamgen.config import TypingConfig, model_config
from streamgen.decoding.meter import ForwardMeter
from streamgen.families.registry import load_decoder
from streamgen.live import LiveSettings, run_stream_live
from streamgen.stream import StreamRequest, run_pair
from streamgen.timing.costmodel import LinearCost
from streamgen.timing.policies import Policy, StepFacts, evaluate
from streamgen.timing.timeline import TypingModel, arrival_times
from tests.support.row_support import row_context

LAW = LinearCost(a_s=0.5, b_s=0.01)
REQUEST = StreamRequest("live", (), ("Write a function. ", "It adds. ", "Use hints."))  # 18, 27, 37 chars
TYPING = TypingModel(10.0, sentence_pause_s=0.5, paste_code=True)  # arrivals 1.8, 2.7 + .5, 3.7 + 1.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture(scope="module")
def decoder() -> Any:
    return load_decoder(model_config("tiny-llama"), max_new_tokens=8)


@pytest.fixture()
def clock(decoder: Any) -> Any:
    fake = FakeClock()
    decoder.meter = ForwardMeter(clock=fake)

    def advance(module: Any, args: Any, kwargs: Any) -> None:
        fake.now += LAW.cost(1, kwargs["input_ids"].shape[1])

    handle = decoder.model.register_forward_pre_hook(advance, with_kwargs=True)
    yield fake
    handle.remove()


def _recorded(decoder: Any, clock: FakeClock) -> tuple[list[StepFacts], Any]:
    """The replay (today's stream run) on the fake clock, as post-hoc step facts, and its outcome."""
    outcome = run_pair(decoder, REQUEST, Greedy(), base_first=True, clock=clock, sleep=clock.sleep)
    assert outcome.timing is None and clock.slept == []  # the replay never sleeps
    times = arrival_times(REQUEST.segments, TYPING)
    return [StepFacts(t, s.answer.wall_s, s.answer.forwards, s.answer.meter.tokens_fed, s.draft_tokens_in,
                      s.accepted_tokens, s.generated_tokens)
            for t, s in zip(times, outcome.steps, strict=True)], outcome


def test_arrivals_of_the_request() -> None:
    assert arrival_times(REQUEST.segments, TYPING) == pytest.approx((1.8, 2.7 + 0.5, 3.7 + 1.0))


def test_every_segment_live_equals_post_hoc_exactly(decoder: Any, clock: FakeClock) -> None:
    facts, replay = _recorded(decoder, clock)
    assert all(f.wall_s == pytest.approx(LAW.cost(f.forwards, f.tokens_fed)) for f in facts)
    post = evaluate(facts, Policy("every"))
    clock.now = 100.0  # the live run measures from its own start
    live = run_stream_live(decoder, REQUEST, Greedy(), LiveSettings(Policy("every"), TYPING), clock=clock,
                           sleep=clock.sleep)
    assert [t.step for t in live.timing] == [r.step for r in post.ran] == [1, 2, 3]
    assert [t.start_s for t in live.timing] == pytest.approx([r.start_s for r in post.ran], abs=1e-9)
    # by hand, not through next_step: step i starts at max(t_i, end of step i − 1), each lasting its live wall
    w1, w2 = (s.answer.wall_s for s in live.steps[:2])
    assert [t.start_s for t in live.timing] == pytest.approx([1.8, max(3.2, 1.8 + w1), max(4.7, max(3.2, 1.8 + w1) + w2)])
    assert clock.slept[0] == pytest.approx(1.8)  # it waited for the first segment
    end = live.timing[-1].start_s + live.steps[-1].answer.wall_s
    assert end - live.timing[-1].arrival_s == pytest.approx(post.wait_s, abs=1e-9)
    assert [s.answer.token_ids for s in live.steps] == [s.answer.token_ids for s in replay.steps]


def test_latest_only_live_skips_what_post_hoc_skips(decoder: Any, clock: FakeClock) -> None:
    facts, _ = _recorded(decoder, clock)
    assert facts[0].arrival_s + facts[0].wall_s >= facts[2].arrival_s  # step 1 outlasts the typing
    post = evaluate(facts, Policy("latest"), LAW)
    clock.now = 0.0
    live = run_stream_live(decoder, REQUEST, Greedy(), LiveSettings(Policy("latest"), TYPING), clock=clock,
                           sleep=clock.sleep)
    assert [t.step for t in live.timing] == [r.step for r in post.ran] == [1, 3] and post.skipped == (2,)
    assert [t.start_s for t in live.timing] == pytest.approx([r.start_s for r in post.ran], abs=1e-9)
    # by hand, not through next_step: step 1 starts at its arrival (1.8), outlasts segments 2 and 3, so the
    # newest (3) starts the instant step 1's live work ends; tests/streamgen/timing/test_timing_oracle.py checks many more
    assert [t.start_s for t in live.timing] == pytest.approx([1.8, 1.8 + live.steps[0].answer.wall_s])
    # the post-hoc final step is modelled (it verifies step 1's draft); on the fake clock the live one
    # costs exactly the law on its real work, so the waits differ by exactly the model's error
    assert post.ran[-1].modelled
    final = live.steps[-1]
    actual = LAW.cost(final.answer.forwards, final.answer.meter.tokens_fed)
    assert final.answer.wall_s == pytest.approx(actual)
    live_wait = live.timing[-1].start_s + final.answer.wall_s - live.timing[-1].arrival_s
    modelled = post.ran[-1].end_s - post.ran[-1].start_s
    assert live_wait - post.wait_s == pytest.approx(actual - modelled, abs=1e-9)


def test_live_rows_carry_the_timeline(decoder: Any, clock: FakeClock) -> None:
    live = LiveSettings.from_config(TypingConfig(chars_per_s=[10.0], sentence_pause_s=0.5, live_policy="latest"))
    assert live == LiveSettings(Policy("latest"), TYPING)
    outcome = run_pair(decoder, REQUEST, Greedy(), base_first=False, live=live, clock=clock, sleep=clock.sleep)
    ctx = row_context("tiny-llama", "coedit", live=TypingConfig(chars_per_s=[10.0], live_policy="latest"))
    pair, steps = outcome_rows(outcome, ctx)
    assert [s.step for s in steps] == [1, 3] and steps[-1].is_final and not steps[0].is_final
    assert [s.arrival_s for s in steps] == pytest.approx([1.8, 4.7])
    assert steps[0].start_s == pytest.approx(1.8) and steps[1].prefix_chars == 37
    # step 3 follows step 1: it arrived with segments 2 and 3 (the viewer's request, segment by segment)
    assert [s.arrived_text for s in steps] == [REQUEST.prefix(1), REQUEST.text[len(REQUEST.prefix(1)):]]
    assert pair.live_policy == "latest" and pair.speculative_forwards == steps[0].forwards
    assert LiveSettings.from_config(TypingConfig()) is None


def test_replay_rows_keep_their_values_and_gain_typing_counts(decoder: Any, clock: FakeClock) -> None:
    outcome = run_pair(decoder, REQUEST, Greedy(), base_first=True)
    pair, steps = outcome_rows(outcome, row_context("tiny-llama", "coedit"))
    assert [s.step for s in steps] == [1, 2, 3] and [s.prefix_chars for s in steps] == [18, 27, 37]
    assert [s.sentence_ends for s in steps] == [0, 1, 2] and [s.pasted_chars for s in steps] == [0, 0, 0]
    assert all(s.arrival_s is None and s.start_s is None for s in steps) and pair.live_policy is None
