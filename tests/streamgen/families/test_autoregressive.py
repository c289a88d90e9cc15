"""The autoregressive decoder: rollback, one-forward verification, acceptance, prefix reuse, accounting."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamgen.acceptance_rules import Greedy, Threshold
from streamgen.config import ConfigError
from streamgen.decoding.base import common_prefix_length
from streamgen.decoding.verification import accepted_length
from streamgen.families.autoregressive.decoder import (
    AutoregressiveDecoder,
    CacheRollbackError,
    KVState,
    RequestTooLongError,
    new_cache,
    rollback,
    verification_from_logits,
)
from streamgen.models.tokenizers import tiny_tokenizer
from streamgen.models.weights import tiny_model

ARCHS = ("llama", "qwen3", "gemma3")
HYP = settings(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TEXT = st.text(alphabet="abcdef xyz.,\n", min_size=1, max_size=40)


@pytest.fixture(scope="module")
def decoders() -> dict[str, AutoregressiveDecoder]:
    tok = tiny_tokenizer()
    return {a: AutoregressiveDecoder(tiny_model(a, seed=11), tok, max_new_tokens=12) for a in ARCHS}


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, 500, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def logits_all(model, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens])).logits[0]


# ------------------------------------------------------------------ rollback


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("keep", [0, 7, 30, 39])
def test_rollback_then_continue_equals_fresh_prefill(decoders, arch: str, keep: int) -> None:
    """Including Gemma-3 past its 24-token sliding window."""
    dec, seq, tail = decoders[arch], ids(40), ids(6, seed=1)
    state = KVState()
    with torch.inference_mode():
        dec.forward(state, seq, 1, "prefill")
        state.rollback(keep)
        assert state.cache.get_seq_length() == keep and state.ids == seq[:keep]
        got = dec.forward(state, tail, len(tail), "decode")
    expected = logits_all(dec.model, seq[:keep] + tail)[-len(tail):]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_rollback_bounds_and_noop(decoders) -> None:
    dec = decoders["llama"]
    state = KVState()
    with torch.inference_mode():
        dec.forward(state, ids(10), 1, "prefill")
    rollback(state.cache, 10)  # keep everything: must not call crop(0) semantics
    assert state.cache.get_seq_length() == 10
    with pytest.raises(CacheRollbackError):
        rollback(state.cache, 11)
    with pytest.raises(CacheRollbackError):
        rollback(state.cache, -1)


def test_rollback_refuses_a_config_built_sliding_cache_past_its_window(decoders) -> None:
    """The transformers-5 trap: DynamicCache(config) keeps only the window on sliding layers."""
    from transformers import DynamicCache

    model = decoders["gemma3"].model
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids(40)]), cache=cache, use_cache=True)
    with pytest.raises(CacheRollbackError, match="new_cache"):
        rollback(cache, 20)
    # what new_cache() gives instead: every layer keeps all 40 positions, so rolling back past the window works
    full = new_cache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids(40)]), cache=full, use_cache=True)
    assert [layer.keys.shape[-2] for layer in full.layers] == [40] * len(full.layers)
    rollback(full, 20)
    assert full.get_seq_length() == 20


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([1, 2], [1, 2]) == 2


# ------------------------------------------------------------------ verification


@pytest.mark.parametrize("arch", ARCHS)
def test_verify_forward_matches_token_by_token_decoding(decoders, arch: str) -> None:
    dec = decoders[arch]
    request, draft = dec.render(user("Write a function. It adds numbers.")), ids(9, seed=3)
    state = KVState()
    with torch.inference_mode():
        one = dec.forward(state, request + draft, len(draft) + 1, "verify")
        verification = verification_from_logits(one, draft)
        step_state = KVState()
        rows = [dec.forward(step_state, request, 1, "prefill")[-1]]
        for tok in draft:
            rows.append(dec.forward(step_state, [tok], 1, "decode")[-1])
    rows_t = torch.stack(rows)
    torch.testing.assert_close(one, rows_t, rtol=0, atol=1e-5)
    probs = torch.softmax(rows_t[:-1], -1)[torch.arange(len(draft)), torch.tensor(draft)]
    assert verification.argmax == tuple(rows_t[:-1].argmax(-1).tolist())
    torch.testing.assert_close(torch.tensor(verification.probs), probs, rtol=0, atol=1e-5)


def test_acceptance_rules_at_the_extremes(decoders) -> None:
    dec = decoders["qwen3"]
    msgs = user("Explain lists. Be brief.")
    answer = list(dec.generate(msgs).token_ids)
    draft = answer[:5] + ids(6, seed=9)
    with torch.inference_mode():
        logits = dec.forward(KVState(), dec.render(msgs) + draft, len(draft) + 1, "verify")
    v = verification_from_logits(logits, draft)
    assert accepted_length(draft, v, Threshold(0.0)) == len(draft)
    assert accepted_length(draft, v, Threshold(1.0)) == 0  # τ = 1 keeps nothing (docs/accounting.md)
    assert accepted_length(draft, v, Greedy()) >= 5  # the model's own greedy tokens are its argmax
    # The model's own greedy answer: greedy accepts all; threshold at the smallest argmax prob does too,
    # and just above it stops exactly at that position.
    with torch.inference_mode():
        logits = dec.forward(KVState(), dec.render(msgs) + answer, len(answer) + 1, "verify")
    v = verification_from_logits(logits, answer)
    assert v.argmax == tuple(answer)
    low = min(v.probs)
    assert accepted_length(answer, v, Greedy()) == accepted_length(answer, v, Threshold(low)) == len(answer)
    assert accepted_length(answer, v, Threshold(low + 1e-6)) == v.probs.index(low)


def test_tau_one_keeps_nothing_even_where_fp32_rounds_the_probability_to_one() -> None:
    """A logit margin of 20 makes the fp32 softmax exactly 1.0: p >= τ would accept at τ = 1."""
    logits = torch.zeros(3, 8)
    logits[0, 5] = logits[1, 6] = 20.0
    v = verification_from_logits(logits, [5, 6])
    assert v.probs == (1.0, 1.0)
    assert accepted_length([5, 6], v, Threshold(1.0)) == 0
    assert accepted_length([5, 6], v, Threshold(0.999)) == 2
    for bad in (1.5, 1.0 + 1e-9, -0.1, float("nan")):
        with pytest.raises(ValueError, match=r"tau in \[0, 1\]"):
            Threshold(bad)


@settings(HYP, max_examples=30)
@given(tau=st.floats(0.5 + 1e-6, 1.0), swap=st.integers(0, 7))
def test_threshold_above_one_half_accepts_only_argmax_tokens(tau: float, swap: int) -> None:
    """On the scripted calibrated model (set probabilities, many above 0.5): its answer with one token
    replaced. τ > 1/2 keeps the run up to the first position below τ or the replaced one, and every kept
    token is the verifier's argmax."""
    from streamgen.models.scripted import SCRIPTS

    dec = _scripted_calibrated()
    msgs = user("Explain lists. Be brief.")
    draft = list(dec.generate(msgs).token_ids)
    draft[swap % len(draft)] = 300 if draft[swap % len(draft)] != 300 else 301
    with torch.inference_mode():
        logits = dec.forward(KVState(), dec.render(msgs) + draft, len(draft) + 1, "verify")
    v = verification_from_logits(logits, draft)
    n = accepted_length(draft, v, Threshold(tau))
    probs = SCRIPTS["calibrated"]
    cut = next((j for j in range(len(draft)) if probs.prob(j) < tau), len(draft)) if tau < 1 else 0
    assert n == min(cut, swap % len(draft))
    assert all(draft[j] == v.argmax[j] for j in range(n))


@functools.cache
def _scripted_calibrated() -> AutoregressiveDecoder:
    from streamgen.config import model_config
    from streamgen.families.registry import load_decoder

    return load_decoder(model_config("scripted-ar-calibrated"), max_new_tokens=12)


# ------------------------------------------------------------------ decoding and accounting


@pytest.mark.parametrize("arch", ARCHS)
def test_base_generation_matches_full_recompute_and_counts_forwards(decoders, arch: str) -> None:
    dec = decoders[arch]
    msgs = user("Write a Python function that adds two numbers.")
    gen = dec.generate(msgs)
    request, seq = dec.render(msgs), []
    for _ in range(dec.max_new_tokens):  # no-cache greedy reference
        seq.append(int(logits_all(dec.model, request + seq)[-1].argmax()))
        if seq[-1] in dec.eos_token_ids:
            break
    assert list(gen.token_ids) == seq
    assert gen.forwards == len(gen.token_ids)
    assert gen.meter.tokens_fed == len(request) + len(gen.token_ids) - 1
    assert gen.wall_s >= gen.meter.forward_wall_s > 0


def test_stops_at_eos_and_eos_counts_as_an_answer_token(decoders) -> None:
    base = decoders["llama"]
    msgs = user("Say something short.")
    full = list(base.generate(msgs).token_ids)
    eos = full[3]
    dec = AutoregressiveDecoder(base.model, base.tokenizer, max_new_tokens=12, eos_token_ids=[eos])
    gen = dec.generate(msgs)
    assert list(gen.token_ids) == full[: full.index(eos) + 1] and gen.finished
    assert gen.forwards == len(gen.token_ids)


def test_fully_accepted_draft_ending_in_eos_costs_one_forward(decoders) -> None:
    base = decoders["gemma3"]
    msgs = user("Name a colour. Then stop.")
    full = list(base.generate(msgs).token_ids)
    dec = AutoregressiveDecoder(base.model, base.tokenizer, max_new_tokens=12, eos_token_ids=[full[4]])
    answer = dec.generate(msgs)
    assert answer.finished
    for session in (dec.open_stream(), _warm_session(dec, msgs)):
        result = session.step(msgs, answer.token_ids, Greedy())
        assert result.answer.token_ids == answer.token_ids
        assert result.answer.forwards == 1 and result.accepted_tokens == len(answer.token_ids)
        assert result.generated_tokens == 0


def _warm_session(dec: AutoregressiveDecoder, msgs):
    session = dec.open_stream()
    session.step([{"role": "user", "content": msgs[0]["content"][:6]}], [], Greedy())
    return session


@pytest.mark.parametrize("arch", ARCHS)
@settings(HYP, max_examples=40)
@given(text=TEXT, keep=st.integers(0, 12), junk=st.integers(0, 5), tau=st.sampled_from([None, 0.0, 0.3, 0.9]))
def test_residual_forwards_is_one_plus_tokens_decoded_after_verify(decoders, arch, text, keep, junk, tau) -> None:
    dec = decoders[arch]
    msgs = user(text)
    base = dec.generate(msgs)
    draft = list(base.token_ids[:keep]) + ids(junk, seed=keep)
    rule = Greedy() if tau is None else Threshold(tau)
    r = dec.open_stream().step(msgs, draft, rule)
    n = len(r.answer.token_ids)
    decoded_after_verify = max(0, n - r.accepted_tokens - 1)
    assert r.answer.forwards == 1 + decoded_after_verify
    assert r.generated_tokens == n - r.accepted_tokens
    if tau is None:
        assert r.answer.token_ids == base.token_ids  # greedy from a fresh session is lossless
        assert r.accepted_tokens >= min(keep, len(base.token_ids))
    if tau == 0.0:
        assert r.accepted_tokens == len(dec.truncate_draft(draft))


# ------------------------------------------------------------------ prefix reuse


@pytest.mark.parametrize("arch", ARCHS)
@settings(HYP, max_examples=20)
@given(parts=st.lists(TEXT, min_size=2, max_size=4))
def test_prefix_reuse_never_changes_an_answer(decoders, arch, parts) -> None:
    """Reusing the cached request prefix gives the answers a fresh session gives, and feeds fewer tokens."""
    dec = decoders[arch]
    warm, draft_w, draft_c = dec.open_stream(), [], []
    for i in range(1, len(parts) + 1):
        msgs = user("".join(parts[:i]))
        request = dec.render(msgs)
        rw = warm.step(msgs, draft_w, Greedy())
        rc = dec.open_stream().step(msgs, draft_c, Greedy())
        assert rw.answer.token_ids == rc.answer.token_ids
        assert rw.accepted_tokens == rc.accepted_tokens
        cached = int(rw.extra["cached_prefix_tokens"])
        assert rw.extra["verify_tokens_fed"] == len(request) - cached + len(dec.truncate_draft(draft_w))
        assert 0 <= cached < len(request)
        if i > 1:
            assert cached >= 3  # at least '<|im_start|>user\n' is reused
            assert rw.answer.meter.tokens_fed < rc.answer.meter.tokens_fed or cached == 0
        draft_w, draft_c = list(rw.answer.token_ids), list(rc.answer.token_ids)


def test_prefix_reuse_survives_a_moved_bpe_boundary(decoders) -> None:
    """'def ad' + 'd(a, b)' re-tokenises inside the user text ('ad' becomes part of 'add'): reuse stops
    at the last shared token, before the end of the first request's user text, and answers agree."""
    dec = decoders["llama"]
    first, second = user("def ad"), user("def add(a, b)")
    a, b = dec.render(first), dec.render(second)
    c = common_prefix_length(a, b)
    head = len(dec.tokenizer("<|im_start|>user\ndef ad", add_special_tokens=False)["input_ids"])
    assert c < head  # the boundary moved inside the user text, not just at the template suffix
    session = dec.open_stream()
    d1 = session.step(first, [], Greedy())
    r = session.step(second, d1.answer.token_ids, Greedy())
    assert r.extra["cached_prefix_tokens"] == c
    assert r.extra["verify_tokens_fed"] == len(b) - c + len(dec.truncate_draft(d1.answer.token_ids))
    assert r.answer.token_ids == dec.generate(second).token_ids


def test_request_longer_than_the_context_names_the_fix(decoders) -> None:
    base = decoders["llama"]
    dec = AutoregressiveDecoder(base.model, base.tokenizer, max_new_tokens=8, max_context=40)
    with pytest.raises(RequestTooLongError, match="shorter request.*more context") as info:
        dec.generate(user("word " * 60))
    assert isinstance(info.value, ConfigError)
    with pytest.raises(RequestTooLongError):
        dec.open_stream().step(user("word " * 60), [], Greedy())


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-gemma3", "scripted-ar-prefix"])
def test_same_answers_and_counts_on_cuda(name: str) -> None:
    """On a GPU (fp32): the autoregressive family gives the CPU's tokens and forward counts, base and stream."""
    from streamgen.config import model_config
    from streamgen.families.registry import load_decoder
    from streamgen.stream import StreamRequest, run_pair

    req = StreamRequest("g", (), ("Write a function that adds two numbers. ", "It should handle floats."))
    runs = [run_pair(load_decoder(model_config(name), device=dev, max_new_tokens=12), req, Greedy(), base_first=True)
            for dev in ("cpu", "cuda")]
    cpu, gpu = ([(s.accepted_tokens, s.answer.forwards, s.answer.token_ids) for s in o.steps] for o in runs)
    assert cpu == gpu and runs[0].base.token_ids == runs[1].base.token_ids
    assert runs[1].stream.token_ids == runs[1].base.token_ids
