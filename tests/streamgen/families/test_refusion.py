"""ReFusion slot decoding on a tiny seeded Qwen3: slot bookkeeping, KV exactness, EOS, forward counts."""

from __future__ import annotations

import math

import pytest
import torch

from streamgen.acceptance_rules import Greedy, Threshold
from streamgen.config import ConfigError, model_config
from streamgen.decoding.base import Decoder
from streamgen.families.refusion.decoder import ReFusionDecoder, ReFusionSettings, settings_from
from streamgen.families.refusion.slots import KV, SlotState
from streamgen.families.registry import load_decoder
from streamgen.models.tokenizers import tiny_tokenizer
from streamgen.models.weights import tiny_model

MASK = 512  # one past the tiny tokenizer's vocabulary: never in a request
G = 32  # generation length: 2 blocks of 16, slots of 4
MSGS = [{"role": "user", "content": "Write a Python function that returns the sum of a list."}]
OTHER = [{"role": "user", "content": "Can you explain how a hash table works? Make it short."}]
ADDS = [{"role": "user", "content": "Write a function that adds two numbers."}]
EOS_SEED = 11  # the first seed whose answer to ADDS ends in EOS (at position 4, inside the first block)


def _model(seed: int = 0, eos: str = "keep"):
    """Tiny Qwen3; ``eos='never'`` zeroes EOS's output row (random logits elsewhere beat 0)."""
    model = tiny_model("qwen3", seed=seed, vocab_size=MASK + 1)
    eos_id = tiny_tokenizer().eos_token_id
    with torch.no_grad():
        w = model.lm_head.weight
        if eos == "never":
            w[eos_id].zero_()
    return model


def _decoder(model, slot_t=0.9, tok_t=0.4, **kw) -> ReFusionDecoder:
    s = ReFusionSettings(slot_size=4, serial_num_blocks=2, slot_threshold=slot_t, token_threshold=tok_t,
                         mask_token_id=MASK, **kw)
    return ReFusionDecoder(model, tiny_tokenizer(), s, max_new_tokens=G)


def _fresh_prefill_kv(d: ReFusionDecoder, state: SlotState) -> KV:
    """KV of one plain causal prefill of prompt + committed tokens in generation order."""
    p = len(state.prompt)
    ids = state.prompt + [state.answer[q] for q in state.order]
    pos = list(range(p)) + [p + q for q in state.order]
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        d.model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([pos]), cache=cache, use_cache=True)
    return KV.from_cache(cache, 0, len(ids))


def _decode_state(d: ReFusionDecoder, messages=MSGS) -> SlotState:
    state = SlotState(d.text.render(messages))
    with torch.no_grad():
        d.engine.decode(state, d.gen_length)
    return state


@pytest.mark.parametrize("slot_t,tok_t", [(1.0, 0.0), (1.0, 1.0)])
def test_answer_is_ordered_by_original_position_and_kv_matches_prefill(slot_t, tok_t):
    """One most-confident slot per round (τ_slot=1): slots commit out of order; the answer is
    assembled by position, and the committed KV equals a fresh prefill (verify and infill commits)."""
    d = _decoder(_model(eos="never"), slot_t, tok_t)
    state = _decode_state(d)
    assert state.order != sorted(state.order), "this seed should commit slots out of order"
    assert sorted(state.order) == list(range(G))
    gen = d.generate(MSGS)
    assert list(gen.token_ids) == [state.answer[q] for q in range(G)]
    assert not gen.finished
    fresh = _fresh_prefill_kv(d, state)
    assert state.kv.length == fresh.length == len(state.prompt) + G
    for (k, v), (fk, fv) in zip(state.kv.layers, fresh.layers, strict=True):
        assert torch.allclose(k, fk, atol=1e-4) and torch.allclose(v, fv, atol=1e-4)


def test_eos_truncates_the_answer():
    d = _decoder(_model(EOS_SEED), 0.9, 0.4)
    gen = d.generate(ADDS)
    eos = d.tokenizer.eos_token_id
    assert gen.finished and gen.token_ids[-1] == eos
    assert eos not in gen.token_ids[:-1] and len(gen.token_ids) < G
    assert "<|im_end|>" not in gen.text


def test_slot_state_truncates_at_first_eos_by_position():
    st = SlotState([1, 2])
    empty = KV(())
    st.commit([4, 5, 6, 7], [10, 2, 11, 12], empty, frozenset({2}))  # EOS at position 5
    st.commit([0, 1, 2, 3], [20, 21, 22, 23], empty, frozenset({2}))
    assert st.tokens(G) == [20, 21, 22, 23, 10, 2]


@pytest.mark.parametrize("slot_t,tok_t,expected", [
    (0.0, 0.0, 4),    # every slot chosen and accepted: plan + verify per block
    (1.0, 0.0, 16),   # one slot per round, accepted: 2 per slot
    (1.0, 1.0, 64),   # nothing passes τ_tok: plan + verify + (k-1) infill pairs = 2k per slot
])
def test_forward_counts_follow_the_round_structure(slot_t, tok_t, expected):
    d = _decoder(_model(eos="never"), slot_t, tok_t)
    assert d.generate(MSGS).forwards == expected


@pytest.mark.parametrize("seed", [0, 1])
def test_forward_counts_at_reference_thresholds_follow_the_official_sampler(seed):
    """τ 0.9/0.4: the base run costs what generate_refusion's does (tests/support/official_samplers.py); a stream
    step that keeps nothing costs 1 verify + exactly the base run."""
    from tests.support.official_samplers import refusion_generate

    d = _decoder(_model(seed), 0.9, 0.4)
    _, trace = refusion_generate(d.model, d.text.render(ADDS), gen_length=G, slot_size=4, serial_num_blocks=2,
                                 slot_threshold=0.9, token_threshold=0.4, mask_id=MASK,
                                 eos_token_id=d.tokenizer.eos_token_id)
    base = d.generate(ADDS).forwards
    assert base == trace.calls
    res = d.open_stream().step(ADDS, d.generate(OTHER).token_ids, Threshold(0.01))
    assert res.accepted_tokens == 0 and res.answer.forwards == 1 + base


def test_every_call_is_metered_with_tokens_fed():
    d = _decoder(_model(eos="never"), 1.0, 1.0)
    d.generate(MSGS)
    kinds = [c.kind for c in d.meter.calls]
    assert set(kinds) == {"plan", "verify", "infill_predict", "infill_verify"}
    assert kinds.count("infill_predict") == kinds.count("infill_verify")
    assert d.meter.calls[0].tokens_fed == len(d.text.render(MSGS)) + 16  # first plan carries the prompt


def _scripted(behaviour: str, *overrides: str) -> ReFusionDecoder:
    return load_decoder(model_config(f"scripted-refusion-{behaviour}", list(overrides)), max_new_tokens=16)


@pytest.mark.parametrize("rule", [Greedy(), Threshold(0.5), Threshold(0.0)])
def test_residual_at_least_three(rule):
    """Scripted constant model (answer A tokens, one slot of s per round): its own answer kept whole costs
    the floor (1 verify + 1 confirming round); an unrelated draft and an EOS-only draft are verified too
    (first call verify_stream) and, unless τ = 0 keeps them, cost 1 + 2·⌈A/s⌉."""
    from streamgen.models.scripted import SCRIPTS

    d = _scripted("constant")
    a_tokens, s = SCRIPTS["constant"].length + 1, d.settings.slot_size
    eos = d.tokenizer.eos_token_id
    own = list(d.generate(ADDS).token_ids)
    for draft in (own, list(range(300, 310)) + [eos], [eos]):
        start = len(d.meter.calls)
        res = d.open_stream().step(ADDS, draft, rule)
        assert d.meter.calls[start].kind == "verify_stream" and res.draft_tokens_in == len(draft)
        kept_whole = res.accepted_tokens == len(draft)
        assert kept_whole == (draft == own or rule == Threshold(0.0))
        expected = 3 if kept_whole else 1 + 2 * math.ceil(a_tokens / s)
        assert res.answer.forwards == expected >= d.min_residual_forwards == 3
        assert list(res.answer.token_ids) == (draft if kept_whole else own)


@pytest.mark.parametrize("eos", ["keep", "never"])
def test_fully_accepted_draft_costs_exactly_the_minimum(eos):
    """A tiny random model's own answer at τ = 0 (EOS-ended for EOS_SEED, else filling the buffer): the
    whole draft is kept (EOS included), the answer is the draft, and the cost is exactly the floor."""
    d = _decoder(_model(EOS_SEED if eos == "keep" else 0, eos=eos), 0.9, 0.4)
    draft = d.generate(ADDS).token_ids
    assert (draft[-1] == d.tokenizer.eos_token_id) == (eos == "keep") and len(draft) <= G
    res = d.open_stream().step(ADDS, draft, Threshold(0.0))
    assert res.accepted_tokens == res.draft_tokens_in == len(draft) and res.generated_tokens == 0
    assert res.answer.token_ids == draft and res.answer.forwards == 3
    assert [c.kind for c in d.meter.calls[-3:]] == ["verify_stream", "plan", "verify"]


@pytest.mark.parametrize("behaviour,tau", [("prefix", None), ("calibrated", 0.7)])
def test_stream_step_keeps_the_accepted_prefix(behaviour, tau):
    """Scripted prefix: exactly k kept (greedy); scripted calibrated: τ cuts at its first probability
    below τ. The kept tokens sit unchanged at the front of the answer."""
    from streamgen.models.scripted import SCRIPTS

    script, d = SCRIPTS[behaviour], _scripted(behaviour)
    draft = d.open_stream().step(MSGS, [], Greedy()).answer.token_ids  # written for another request
    rule = Greedy() if tau is None else Threshold(tau)
    res = d.open_stream().step(ADDS, draft, rule)
    cut = script.k if tau is None else next(j for j in range(len(draft)) if script.prob(j) < tau)
    assert 0 < res.accepted_tokens == cut < len(draft)
    assert list(res.answer.token_ids[:cut]) == list(draft[:cut])
    assert res.answer.token_ids == d.generate(ADDS).token_ids


def test_settings_validation_and_config_loading():
    with pytest.raises(ConfigError, match="slot_sise"):
        settings_from({"slot_sise": 4})
    with pytest.raises(ConfigError, match="token_threshold"):
        settings_from({"token_threshold": 1.5})
    d = load_decoder(model_config("tiny-refusion"), max_new_tokens=24)
    assert isinstance(d, Decoder)
    # the configured generation length is the official one, not capped at the budget
    assert d.family == "refusion" and (d.gen_length, d.block_length) == (32, 16) and d.mask_id == MASK
    assert d.for_benchmark("mbpp") is d
    big = settings_from(dict(model_config("refusion-8b").decoding))
    assert (big.slot_size, big.serial_num_blocks, big.gen_length, big.mask_token_id) == (32, 4, 512, 151670)
    assert big.per_benchmark["mbpp"]["token_threshold"] == 0.3


def test_run_pair_works_unchanged():
    from streamgen.stream import StreamRequest, run_pair

    d = load_decoder(model_config("tiny-refusion"), max_new_tokens=G)
    req = StreamRequest("ex1", (), ("Write a function that adds two numbers. ", "It should handle floats."))
    out = run_pair(d, req, Threshold(0.5), base_first=True)
    assert len(out.steps) == 2 and out.min_residual_forwards == 3
    assert out.residual_forwards >= 3 and out.base.forwards >= 2
    assert out.steps[0].accepted_tokens == 0 and out.steps[1].draft_tokens_in == len(out.steps[0].answer.token_ids)


def test_stream_reuses_the_request_prefix_kv():
    """The second step feeds only the request's new tail + the draft, and scores it as a fresh pass does."""
    d = _decoder(_model(), 0.9, 0.4)
    first, full = [{"role": "user", "content": "Write a function"}], ADDS
    session = d.open_stream()
    draft = session.step(first, [], Threshold(0.5)).answer.token_ids
    d.meter.calls.clear()
    session.step(full, draft, Threshold(0.5))
    verify = d.meter.calls[0]
    prompt, content = d.text.render(full), d.content(draft)
    assert verify.kind == "verify_stream" and verify.tokens_fed < len(prompt) + len(content)
    fresh, _ = d.score(full, content)
    reused, _ = d.score(full, content, reuse=session.last)
    assert fresh.argmax == reused.argmax
    assert all(abs(a - b) < 1e-5 for a, b in zip(fresh.probs, reused.probs, strict=True))


@pytest.mark.gpu
def test_same_answers_and_counts_on_cuda():
    """On a GPU: the same tokens and forward counts as on CPU (fp32), for ReFusion and LLaDA/Dream."""
    for name in ("tiny-refusion", "tiny-llada", "tiny-dream"):
        cpu = load_decoder(model_config(name), max_new_tokens=G)
        gpu = load_decoder(model_config(name), device="cuda", max_new_tokens=G)
        a, b = cpu.generate(ADDS), gpu.generate(ADDS)
        assert a.token_ids == b.token_ids and a.forwards == b.forwards
        ra = cpu.open_stream().step(ADDS, a.token_ids, Threshold(0.0))
        rb = gpu.open_stream().step(ADDS, b.token_ids, Threshold(0.0))
        assert ra.accepted_tokens == rb.accepted_tokens and ra.answer.forwards == rb.answer.forwards
