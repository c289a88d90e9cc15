"""LLaDA / Dream style decoding on tiny in-project models; visible vs hidden verification; paper §6.5."""

from __future__ import annotations

import math

import pytest
import torch

from streamgen.config import ConfigError, model_config
from streamgen.decoding.acceptance import Greedy, Threshold
from streamgen.decoding.base import Decoder
from streamgen.decoding.bidirectional import (
    BidirectionalDecoder,
    BidirSettings,
    Buffer,
    bidir_settings_from,
    full_attention_logits,
    probe_unrelated,
)
from streamgen.decoding.refusion import ReFusionDecoder, ReFusionSettings
from streamgen.models import load_decoder
from streamgen.tokenizers import tiny_tokenizer
from streamgen.weights import tiny_model

A = [{"role": "user", "content": "Write a function that adds two numbers."}]
B = [{"role": "user", "content": "Can you explain how a hash table works? Make it short."}]
G = 32


def _decoder(name: str, *overrides: str, max_new_tokens: int = G) -> BidirectionalDecoder:
    return load_decoder(model_config(name, list(overrides)), max_new_tokens=max_new_tokens)


@pytest.mark.parametrize("name", ["tiny-llada", "tiny-dream"])
def test_every_denoising_step_is_one_forward(name):
    d = _decoder(name)
    gen = d.generate(A)
    # steps: 16 over the 32 positions (llada: 2 blocks of 16, 8 steps each; dream: one block)
    assert gen.forwards == d.settings.steps == 16 and {c.kind for c in d.meter.calls} == {"denoise"}
    assert all(c.tokens_fed == d.count_request_tokens(A) + G for c in d.meter.calls)
    assert len(gen.token_ids) == G or gen.finished


def test_total_steps_setting():
    d = _decoder("tiny-llada", "decoding.steps=8")
    assert d.geometry.steps_per_block == 4 and d.generate(A).forwards == 8  # 2 blocks × 8 / 2
    with pytest.raises(ConfigError, match="tokens_per_step was replaced"):
        _decoder("tiny-llada", "decoding.tokens_per_step=2")


def test_dream_logits_are_shifted_by_one_and_llada_not():
    for name, shift in (("tiny-llada", 0), ("tiny-dream", 1)):
        d = _decoder(name)
        buf = Buffer(d.text.render(A), [None] * G)
        rows = d.forward(buf, "test")
        ids = torch.tensor([buf.prompt + [d.mask_id] * G])
        with torch.no_grad():
            raw = full_attention_logits(d.model, ids)[0]
        p = len(buf.prompt)
        want = raw[p - shift:p - shift + G]  # the whole vocabulary, the mask id included
        assert torch.equal(rows, want)


def _causal_row(d: ReFusionDecoder, prompt: list[int], draft: list[int], j: int) -> torch.Tensor:
    ids = torch.tensor([prompt + draft])
    with torch.no_grad():
        return d.model(input_ids=ids).logits[0, len(prompt) + j - 1].softmax(-1)


@pytest.mark.parametrize("name", ["tiny-llada", "tiny-dream"])
def test_paper_6_5_causal_verifier_cannot_see_the_token_it_scores(name):
    """Replacing draft token j leaves the causal verifier's distribution at j unchanged; the visible
    bidirectional verifier's changes (it sees the token); the hidden one never sees any draft token."""
    causal = ReFusionDecoder(tiny_model("qwen3"), tiny_tokenizer(), ReFusionSettings(mask_token_id=511, slot_size=4),
                             max_new_tokens=G)
    draft = [int(t) for t in range(40, 40 + 12)]
    j, other = 5, 300
    swapped = draft[:j] + [other] + draft[j + 1:]
    prompt = causal.text.render(A)
    assert torch.equal(_causal_row(causal, prompt, draft, j), _causal_row(causal, prompt, swapped, j))
    # the verify pass reports, for the same position, P(old token) and P(new token) of ONE distribution
    v1, _ = causal.score(A, draft)
    v2, _ = causal.score(A, swapped)
    row = _causal_row(causal, prompt, draft, j)
    assert math.isclose(v1.probs[j], float(row[draft[j]]), rel_tol=1e-4)
    assert math.isclose(v2.probs[j], float(row[other]), rel_tol=1e-4)

    bidir = _decoder(name)
    vis = lambda dr: bidir.forward(Buffer(bidir.text.render(A), dr + [None] * (G - len(dr))), "t")[j]  # noqa: E731
    assert not torch.allclose(vis(draft), vis(swapped))
    h1, _ = bidir.score(A, draft, mode="hidden")
    h2, _ = bidir.score(A, swapped, mode="hidden")
    assert h1.argmax == h2.argmax and h1.probs[:j] == h2.probs[:j] and h1.probs[j + 1:] == h2.probs[j + 1:]


@pytest.mark.parametrize("mode", ["visible", "hidden"])
def test_unrelated_draft_probe(mode):
    """Scripted lastsegment LLaDA (its answer is set by the request; it does not copy the buffer): a draft
    it wrote for another request is rejected at its first token in both modes; its own answer is kept
    whole with median probability = the median of the script's probabilities. ReFusion's causal
    verifier agrees on the same script."""
    import statistics

    from streamgen.scripted import SCRIPTS

    d = _decoder("scripted-llada-lastsegment", f"decoding.verifier_mode={mode}", max_new_tokens=16)
    c = _decoder("scripted-refusion-lastsegment", max_new_tokens=16)
    script, foreign, own = SCRIPTS["lastsegment"], d.generate(B).token_ids, d.generate(A).token_ids
    assert foreign[0] != own[0]
    for dec, label in ((d, mode), (c, "causal")):
        res = probe_unrelated(dec, A, foreign, Threshold(0.9))
        assert (res.mode, res.draft_tokens, res.accepted_tokens) == (label, len(foreign), 0)
        mine = probe_unrelated(dec, A, own, Threshold(0.9))
        assert mine.accepted_tokens == mine.draft_tokens == len(own)
        want = statistics.median(script.prob(j) for j in range(len(own)))
        assert mine.median_prob == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("name", ["tiny-llada", "tiny-dream"])
@pytest.mark.parametrize("mode", ["visible", "hidden"])
def test_stream_residual_and_minimum(name, mode):
    """Kept whole at τ = 0: a buffer-filling draft is the answer at exactly the floor, verify + one
    denoising step. An EOS-ended draft kept whole is the answer too, but the official procedure fills
    every block still masked after it: verify + steps per block × those blocks. A rejected draft costs
    verify + the full denoising of the buffer (the base run's forwards)."""
    d = _decoder(name, f"decoding.verifier_mode={mode}", "decoding.eos_token_ids=[7]")
    assert isinstance(d, Decoder) and d.verifier_mode == mode
    own = d.generate(A)
    content = [t for t in own.token_ids if t not in d.eos_ids]
    spb, block = d.geometry.steps_per_block, d.block_length
    for draft in (content[:5] + [7], (content + [9] * G)[:G]):
        res = d.open_stream().step(A, draft, Threshold(0.0))
        assert res.accepted_tokens == res.draft_tokens_in == len(draft) and res.generated_tokens == 0
        assert list(res.answer.token_ids) == draft
        masked_blocks = G // block - len(draft) // block  # blocks holding a position after the draft
        want = 2 if len(draft) == G else 1 + spb * masked_blocks
        assert res.answer.forwards == want and d.min_residual_forwards == 2
        assert d.meter.calls[-res.answer.forwards].kind == f"verify_{mode}"
    res = d.open_stream().step(A, [7], Threshold(1.0))  # an EOS-only draft is verified, and rejected
    assert res.accepted_tokens == 0 and res.answer.forwards == 1 + own.forwards
    assert res.answer.token_ids == own.token_ids


def test_settings_validation_and_configs():
    with pytest.raises(ConfigError, match="verifier_mode"):
        bidir_settings_from({"verifier_mode": "peek"})
    with pytest.raises(ConfigError, match="remasking"):
        bidir_settings_from({"style": "llada", "remasking": "entropy"})
    with pytest.raises(ConfigError, match="stepz"):
        bidir_settings_from({"stepz": 3})
    for name, mask, eot in (("llada-8b", 126336, 126348), ("dream-7b", 151666, 151645)):
        s = bidir_settings_from(dict(model_config(name).decoding))
        assert s.mask_token_id == mask and s.verifier_mode == "visible" and eot in s.eos_token_ids
        assert (s.block_length, s.steps, s.gen_length) == (None, None, None)  # pure diffusion, 1 token a step
    llada = bidir_settings_from(dict(model_config("llada-8b").decoding))
    assert llada.per_benchmark["humaneval"] == {"gen_length": 512, "logits_inf_ids": [126081]}
    assert llada.per_benchmark["mbpp"]["confidence_inf_ids"] == [126081, 126348]
    assert bidir_settings_from(dict(model_config("dream-7b").decoding)).confidence_top_k == 50
    d = _decoder("tiny-llada", "decoding.eos_token_ids=[7]")
    assert 7 in d.eos_ids and d.tokenizer.eos_token_id in d.eos_ids


def test_causal_stand_in_gets_full_attention():
    """A tiny Qwen3 run as family bidirectional sees the future through an all-True 4-D mask."""
    d = _decoder("tiny-qwen3", "family=bidirectional", "decoding.style=llada", "decoding.mask_token_id=511",
                 "decoding.steps=8")
    buf = Buffer(d.text.render(A), [None] * G)
    first = d.forward(buf, "t")[0].clone()
    buf.answer[G - 1] = 42
    assert not torch.allclose(first, d.forward(buf, "t")[0])
    assert d.generate(A).forwards == G // 4


@pytest.mark.parametrize("name", ["tiny-llada", "tiny-dream"])
def test_run_pair_works_unchanged(name):
    from streamgen.stream import StreamRequest, run_pair

    d = _decoder(name, "decoding.verifier_mode=hidden")
    req = StreamRequest("ex1", (), ("Write a function that adds two numbers. ", "It should handle floats."))
    out = run_pair(d, req, Greedy(), base_first=False)
    assert out.run_order == "stream_first" and out.min_residual_forwards == 2
    assert out.base.forwards == 16 and out.residual_forwards >= 2
    assert d.for_benchmark("mbpp") is d  # no per-benchmark settings in the tiny configs


def test_paper_6_5_visible_verifier_accepts_an_unrelated_draft_hidden_does_not():
    """With a model that reads its own token (as trained LLaDA/Dream do), the visible verifier confirms a
    draft answering a different request (median ≈ 1, everything accepted); hiding the draft removes that."""
    from streamgen.decoding.bidir_models import copying_bidir_model

    tok = tiny_tokenizer()
    model = copying_bidir_model(len(tok), mask_token_id=511, eos_token_id=tok.eos_token_id)
    d = BidirectionalDecoder(model, tok, BidirSettings(style="llada", mask_token_id=511), max_new_tokens=G)
    foreign = [t for t in tok("The quick brown fox jumps over the lazy dog.")["input_ids"]]
    vis = probe_unrelated(d, A, foreign, Threshold(0.9), mode="visible")
    hid = probe_unrelated(d, A, foreign, Threshold(0.9), mode="hidden")
    assert vis.median_prob > 0.99 and vis.accepted_tokens == vis.draft_tokens == len(foreign)
    assert hid.median_prob < 0.1 and hid.accepted_tokens < hid.draft_tokens
