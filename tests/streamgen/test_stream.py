"""The paired base/stream procedure: losslessness, residual vs speculative accounting, records."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.run.rows import error_rows, excluded_rows, outcome_rows
from streamgen.acceptance_rules import Greedy, Threshold
from streamgen.benchmarks import Score
from streamgen.config import ConfigError, model_config
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.families.registry import load_decoder
from streamgen.results.records import PAIRS_SCHEMA, STEPS_SCHEMA, PairRecord, StepRecord, to_table
from streamgen.stream import PairOutcome, RequestError, StreamRequest, run_pair
from tests.support.row_support import row_context

ARCHS = ("llama", "qwen3", "gemma3")
SENTENCES = ("Write a function. ", "It adds two numbers. ", "Return the sum!", " Handle empty lists. ",
             "Use type hints.", "\nExplain why? ", "def f(x):\n", "The fox jumps. ", "abc", "x = 1. ")
CTX = row_context("tiny-llama", "humaneval")
GOLDEN_REQUEST = StreamRequest("golden", (), ("Write a function that adds two numbers. ",
                                              "It should return their sum. ", "Use type hints."))


@pytest.fixture(scope="module")
def decoders() -> dict[str, AutoregressiveDecoder]:
    return {a: load_decoder(model_config(f"tiny-{a}"), max_new_tokens=8) for a in ARCHS}


requests = st.builds(
    lambda segs, hist: StreamRequest("ex", hist, tuple(segs)),
    st.lists(st.sampled_from(SENTENCES) | st.text(alphabet="abcxyz .,?\n", min_size=1, max_size=15),
             min_size=2, max_size=4).filter(lambda s: "".join(s).strip()),
    st.sampled_from([(), ({"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"})]),
)


@pytest.mark.parametrize("arch", ARCHS)
@settings(derandomize=True, deadline=None, max_examples=70, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests, base_first=st.booleans())
def test_greedy_stream_answer_equals_base_answer(decoders, arch: str, request: StreamRequest,
                                                 base_first: bool) -> None:
    """Greedy acceptance is lossless (70 requests per architecture, 210 in all)."""
    outcome = run_pair(decoders[arch], request, Greedy(), base_first=base_first)
    assert outcome.stream.token_ids == outcome.base.token_ids
    assert outcome.base.forwards == len(outcome.base.token_ids)
    for step in outcome.steps:
        decoded_after_verify = max(0, len(step.answer.token_ids) - step.accepted_tokens - 1)
        assert step.answer.forwards == 1 + decoded_after_verify


@pytest.fixture(scope="module")
def scripted_prefix() -> AutoregressiveDecoder:
    return load_decoder(model_config("scripted-ar-prefix"), max_new_tokens=16)


def test_residual_and_speculative_are_separated_exactly(scripted_prefix) -> None:
    """Scripted prefix model (k fixed tokens, then a tail set by the request): step 1 decodes the whole
    answer (A forwards), every later step keeps exactly k and costs A - k (docs/design.md, 'Accounting'). So residual =
    A - k and speculative = A + (n - 2)(A - k), whatever the properties' own definitions say."""
    from streamgen.models.scripted import SCRIPTS

    a_tokens, k, n = SCRIPTS["prefix"].length + 1, SCRIPTS["prefix"].k, len(GOLDEN_REQUEST.segments)
    outcome = run_pair(scripted_prefix, GOLDEN_REQUEST, Greedy(), base_first=True)
    assert [s.accepted_tokens for s in outcome.steps] == [0] + [k] * (n - 1)
    assert outcome.residual_forwards == a_tokens - k
    assert outcome.speculative_forwards == a_tokens + (n - 2) * (a_tokens - k)
    assert outcome.base.forwards == a_tokens and outcome.speedup_forwards == a_tokens / (a_tokens - k)
    walls = [s.answer.wall_s for s in outcome.steps]
    assert outcome.residual_wall_s == walls[-1] and outcome.speculative_wall_s == pytest.approx(sum(walls[:-1]))


@pytest.mark.parametrize("behaviour", ["constant", "prefix", "lastsegment"])
def test_golden_forward_counts(behaviour: str) -> None:
    """Scripted AR models (every path: the EOS-ended draft kept whole, k kept, nothing kept): per step
    (draft in, accepted, generated, forwards, tokens fed) from docs/design.md, 'Accounting'. Tokens fed = the request tokens
    the cache lacks + the draft for the verify pass, plus one per decode forward."""
    from streamgen.models.scripted import SCRIPTS

    d = load_decoder(model_config(f"scripted-ar-{behaviour}"), max_new_tokens=16)
    a_tokens = SCRIPTS[behaviour].length + 1
    kept = {"constant": a_tokens, "prefix": SCRIPTS["prefix"].k, "lastsegment": 0}[behaviour]
    o = run_pair(d, GOLDEN_REQUEST, Greedy(), base_first=True)
    request = [len(d.render(GOLDEN_REQUEST.messages(i))) for i in (1, 2, 3)]
    assert (o.base.forwards, o.base.meter.tokens_fed) == (a_tokens, request[2] + a_tokens - 1)
    for i, s in enumerate(o.steps):
        accepted = 0 if i == 0 else kept
        draft = 0 if i == 0 else a_tokens
        forwards = 1 if accepted == a_tokens else a_tokens - accepted
        fed = request[i] - int(s.extra["cached_prefix_tokens"]) + draft + (forwards - 1)
        got = (s.draft_tokens_in, s.accepted_tokens, s.generated_tokens, s.answer.forwards,
               s.answer.meter.tokens_fed)
        assert got == (draft, accepted, a_tokens - accepted, forwards, fed)
        assert i == 0 or s.extra["cached_prefix_tokens"] > 0  # the request prefix was reused


@pytest.mark.parametrize("arch", ARCHS)
def test_tau_zero_accepts_every_draft_and_finishes_in_one_forward(decoders, arch: str) -> None:
    o = run_pair(decoders[arch], GOLDEN_REQUEST, Threshold(0.0), base_first=False)
    for step in o.steps[1:]:
        assert step.accepted_tokens == step.draft_tokens_in
    assert o.residual_forwards == 1  # every draft is complete (EOS or budget), so nothing is left to decode
    assert o.min_residual_forwards == 1 and o.run_order == "stream_first"


def test_tau_one_accepts_nothing(decoders) -> None:
    o = run_pair(decoders["qwen3"], GOLDEN_REQUEST, Threshold(1.0), base_first=True)
    assert all(s.accepted_tokens == 0 for s in o.steps)
    assert o.residual_forwards == len(o.stream.token_ids)
    assert o.stream.token_ids == o.base.token_ids  # rejecting everything regenerates greedily


def test_run_order_is_respected(decoders) -> None:
    dec = decoders["llama"]
    full = dec.count_request_tokens(GOLDEN_REQUEST.messages())
    for base_first in (True, False):
        start = len(dec.meter.calls)
        run_pair(dec, GOLDEN_REQUEST, Greedy(), base_first=base_first)
        first_call = dec.meter.calls[start]
        assert (first_call.tokens_fed == full) is base_first


def test_bad_requests_raise_one_clear_error(decoders) -> None:
    with pytest.raises(RequestError, match="request is empty"):
        run_pair(decoders["llama"], StreamRequest("e", (), ("  ", "\n")), Greedy(), base_first=True)
    with pytest.raises(RequestError, match="request is empty"):
        run_pair(decoders["llama"], StreamRequest("e", (), ()), Greedy(), base_first=True)
    long = StreamRequest("l", (), ("word " * 5000, "more."))
    with pytest.raises(RequestError, match="shorter request.*more context") as info:
        run_pair(decoders["llama"], long, Greedy(), base_first=True)
    assert isinstance(info.value, ConfigError)


def test_messages_carry_system_prompt_history_and_prefix() -> None:
    r = StreamRequest("m", ({"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}),
                      ("One. ", "Two."), system_prompt="Be brief.")
    assert r.messages(1) == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"},
                             {"role": "assistant", "content": "b"}, {"role": "user", "content": "One. "}]
    assert r.messages()[-1]["content"] == "One. Two."


def test_outcome_rows_fill_every_cost_column(decoders) -> None:
    o = run_pair(decoders["gemma3"], GOLDEN_REQUEST, Greedy(), base_first=True)
    pair, steps = outcome_rows(o, CTX, Score(1.0, "passed", backend="bwrap"), Score(0.0, "failed", view="v"), "s:1")
    assert pair.scorer_version == "s:1" and outcome_rows(o, CTX, scorer_version="s:1").pair.scorer_version is None
    assert pair.base_forwards == o.base.forwards and pair.residual_forwards == o.steps[-1].answer.forwards
    assert pair.speculative_forwards == sum(s.answer.forwards for s in o.steps[:-1])
    assert pair.residual_tokens_fed == o.steps[-1].answer.meter.tokens_fed
    assert pair.base_tokens_fed == o.base.meter.tokens_fed
    assert pair.draft_tokens_final == o.steps[-1].draft_tokens_in
    assert pair.accepted_tokens_final == o.steps[-1].accepted_tokens
    assert pair.base_answer == o.base.text and pair.stream_answer == o.stream.text
    assert pair.min_residual_forwards == 1 and pair.n_segments == 3 and pair.run_order == "base_first"
    assert (pair.base_quality, pair.stream_quality, pair.base_score_status) == (1.0, 0.0, "passed")
    assert (pair.stream_score_status, pair.sandbox_backend, pair.sandbox_view) == ("failed", "bwrap", "v")
    assert pair.excluded_reason is None and pair.error_type is None and pair.device == "cpu"
    assert [s.step for s in steps] == [1, 2, 3] and [s.is_final for s in steps] == [False, False, True]
    assert [s.prefix_chars for s in steps] == [len(GOLDEN_REQUEST.prefix(i)) for i in (1, 2, 3)]
    assert sum(s.forwards for s in steps if not s.is_final) == pair.speculative_forwards
    assert to_table([pair], PairRecord).schema.equals(PAIRS_SCHEMA)
    assert to_table(steps, StepRecord).schema.equals(STEPS_SCHEMA)


def test_empty_answer_is_excluded_but_keeps_its_numbers(decoders) -> None:
    base = decoders["llama"]
    first = base.generate(GOLDEN_REQUEST.messages()).token_ids[0]
    dec = AutoregressiveDecoder(base.model, base.tokenizer, max_new_tokens=8, eos_token_ids=[first])
    o = run_pair(dec, GOLDEN_REQUEST, Greedy(), base_first=True)
    pair, _ = outcome_rows(o, CTX)
    assert pair.excluded_reason == "empty_answer:base+stream" and pair.base_forwards == 1


def test_excluded_and_error_rows_have_null_costs() -> None:
    ex, ex_steps = excluded_rows(CTX, "e1", 1, "single_segment")
    assert ex.excluded_reason == "single_segment" and ex.base_forwards is None and ex_steps == []
    try:
        raise RuntimeError("verifier crashed")
    except RuntimeError as exc:
        err, _ = error_rows(CTX, "e2", 3, exc)
    assert err.error_type == "RuntimeError" and "verifier crashed" in (err.error_traceback or "")
    assert err.residual_forwards is None and err.residual_wall_s is None and err.excluded_reason is None
    assert to_table([ex, err], PairRecord).num_rows == 2


def test_outcome_rows_need_the_request() -> None:
    o = PairOutcome(base=None, steps=(), run_order="base_first")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="request"):
        outcome_rows(o, CTX)


def test_step_rows_carry_the_median_verifier_probability_of_the_incoming_draft(decoders) -> None:
    import statistics

    import torch

    dec = decoders["llama"]
    o = run_pair(dec, GOLDEN_REQUEST, Greedy(), base_first=True)
    _, steps = outcome_rows(o, CTX)
    assert steps[0].verify_median_prob is None  # the first arrival has no draft to verify
    for i, row in enumerate(steps[1:], start=2):
        # independent: one uncached forward over (request i + draft i-1), softmax at each draft position
        draft = list(dec.truncate_draft(o.steps[i - 2].answer.token_ids))
        request = dec.render(GOLDEN_REQUEST.messages(i))
        with torch.inference_mode():
            logits = dec.model(input_ids=torch.tensor([request + draft])).logits[0].float()
        rows = logits[len(request) - 1: len(request) - 1 + len(draft)]
        probs = torch.softmax(rows, -1).gather(1, torch.tensor(draft)[:, None])[:, 0].tolist()
        assert row.verify_median_prob == pytest.approx(statistics.median(probs), abs=1e-5)


def test_step_rows_carry_the_arrived_request_text_and_the_kept_and_thrown_draft(scripted_prefix) -> None:
    """Scripted prefix model: every later step keeps exactly the k fixed tokens of the previous answer.
    So kept = the text of pool[:k], thrown = the text of the previous answer's tokens after k (its EOS
    decodes to nothing), and the arrived texts are the segments themselves."""
    from streamgen.models.scripted import SCRIPTS, pool_tokens

    k = SCRIPTS["prefix"].k
    o = run_pair(scripted_prefix, GOLDEN_REQUEST, Greedy(), base_first=True)
    _, steps = outcome_rows(o, CTX)
    assert [s.arrived_text for s in steps] == list(GOLDEN_REQUEST.segments)
    assert (steps[0].draft_kept_text, steps[0].draft_thrown_text) == ("", "")  # no incoming draft
    fixed = scripted_prefix.decode_text(pool_tokens()[:k])
    for prev, row in zip(o.steps, steps[1:], strict=False):
        assert row.accepted_tokens == k and row.draft_kept_text == fixed
        assert row.draft_thrown_text == scripted_prefix.decode_text(prev.answer.token_ids[k:])
        assert row.draft_thrown_text and fixed + row.draft_thrown_text == prev.answer.text
