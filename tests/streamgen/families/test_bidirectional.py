"""LLaDA / Dream style decoding on tiny in-project models; visible vs hidden verification; paper §6.5."""

from __future__ import annotations

import math

import pytest
import torch

from streamgen.acceptance_rules import Greedy, Threshold
from streamgen.config import ConfigError, model_config
from streamgen.decoding.base import Decoder
from streamgen.families.bidirectional.decoder import (
    BidirectionalDecoder,
    BidirSettings,
    Buffer,
    bidir_settings_from,
    full_attention_logits,
    probe_unrelated,
)
from streamgen.families.refusion.decoder import ReFusionDecoder, ReFusionSettings
from streamgen.families.registry import load_decoder
from streamgen.models.tokenizers import tiny_tokenizer
from streamgen.models.weights import tiny_model

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

    from streamgen.models.scripted import SCRIPTS

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
@pytest.mark.parametrize("refill_after_eos", [False, True])
def test_stream_residual_and_minimum(name, mode, refill_after_eos):
    """Kept whole at τ = 0: a buffer-filling draft is the answer at exactly the floor, verify + one
    denoising step; so is an EOS-ended draft (the positions after its EOS lie after the answer).
    ``refill_after_eos`` (the earlier rule): the EOS-ended draft's tail is masked again and refilled at
    the official rate, ⌈m · steps_per_block / B⌉ for a block with m of its B positions masked. A
    rejected draft costs verify + the full denoising of the buffer (the base run's forwards)."""
    d = _decoder(name, f"decoding.verifier_mode={mode}", "decoding.eos_token_ids=[7]",
                 f"decoding.refill_after_eos={str(refill_after_eos).lower()}")
    assert isinstance(d, Decoder) and d.verifier_mode == mode
    own = d.generate(A)
    content = [t for t in own.token_ids if t not in d.eos_ids]
    spb, block = d.geometry.steps_per_block, d.block_length
    for draft in (content[:5] + [7], (content + [9] * G)[:G]):
        res = d.open_stream().step(A, draft, Threshold(0.0))
        assert res.accepted_tokens == res.draft_tokens_in == len(draft) and res.generated_tokens == 0
        assert list(res.answer.token_ids) == draft
        tail = [block - min(max(len(draft) - lo, 0), block) for lo in range(0, G, block)]  # masked per block
        want = 1 + sum(math.ceil(m * spb / block) for m in tail) if refill_after_eos and len(draft) < G else 2
        assert res.answer.forwards == want and d.min_residual_forwards == 2
        kinds = [c.kind for c in d.meter.calls[-res.answer.forwards:]]
        assert kinds == [f"verify_{mode}"] + ["denoise"] * (want - 1)
    res = d.open_stream().step(A, [7], Threshold(1.0))  # an EOS-only draft is verified, and rejected
    assert res.accepted_tokens == 0 and res.answer.forwards == 1 + own.forwards
    assert res.answer.token_ids == own.token_ids


def _recorded_reveals(d: BidirectionalDecoder, monkeypatch) -> list[tuple[int, int]]:
    """(positions masked before the step, the count it is asked to reveal), per denoising step in order."""
    counts: list[tuple[int, int]] = []
    real = d._reveal

    def spy(buf, logits, end, n):
        counts.append((len(buf.masked(end)), n))
        return real(buf, logits, end, n)

    monkeypatch.setattr(d, "_reveal", spy)
    return counts


@pytest.mark.parametrize("name", ["tiny-llada", "tiny-dream"])
@pytest.mark.parametrize("full_block_refill", [False, True])
def test_partial_refill_runs_the_official_rate(name, full_block_refill, monkeypatch):
    """A kept run of ``a`` tokens that neither ended nor fills the buffer leaves ``m = B − a`` masked in
    its block: ⌈m · steps_per_block / B⌉ steps with the style's own counts over them (LLaDA: ⌊m/k⌋, +1
    for the first m mod k; Dream: int(n(1 − s/t)) on linspace(1, eps, k + 1), the rest at the last step),
    then every later block in full. ``full_block_refill``: every step of every block (the earlier rule)."""
    d = _decoder(name, f"decoding.full_block_refill={str(full_block_refill).lower()}")
    draft = [t for t in d.generate(A).token_ids if t not in d.eos_ids][:5]
    a, spb, block = len(draft), d.geometry.steps_per_block, d.block_length
    m = block - a
    k = spb if full_block_refill else math.ceil(m * spb / block)
    counts = _recorded_reveals(d, monkeypatch)
    res = d.open_stream().step(A, draft, Threshold(0.0))
    assert res.accepted_tokens == a
    later = [spb] * (G // block - 1)  # the blocks after the first are fully masked: the base run's steps
    assert res.answer.forwards == 1 + k + sum(later)
    first = [n for _, n in counts[:k]]
    assert counts[0][0] == m and len(counts) == k + sum(later)
    if d.settings.style == "llada":
        assert first == [m // k + (1 if i < m % k else 0) for i in range(k)]
    else:  # one block, recounted at every step (a position whose argmax is the mask stays masked)
        ts = torch.linspace(1, d.settings.eps, k + 1)
        for i, (left, n) in enumerate(counts[:k - 1]):
            assert n == int(torch.tensor(left) / 1 * (1 - ts[i + 1] / ts[i]))
        assert counts[k - 1][1] == counts[k - 1][0]  # the last step: every position still masked


def test_refill_options_are_validated():
    for option in ("full_block_refill", "refill_after_eos"):
        with pytest.raises(ConfigError, match=f"decoding.{option}='maybe' must be true or false"):
            bidir_settings_from({option: "maybe"})
        assert getattr(bidir_settings_from({option: True}), option) is True


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
    from streamgen.families.bidirectional.model import copying_bidir_model

    tok = tiny_tokenizer()
    model = copying_bidir_model(len(tok), mask_token_id=511, eos_token_id=tok.eos_token_id)
    d = BidirectionalDecoder(model, tok, BidirSettings(style="llada", mask_token_id=511), max_new_tokens=G)
    foreign = [t for t in tok("The quick brown fox jumps over the lazy dog.")["input_ids"]]
    vis = probe_unrelated(d, A, foreign, Threshold(0.9), mode="visible")
    hid = probe_unrelated(d, A, foreign, Threshold(0.9), mode="hidden")
    assert vis.median_prob > 0.99 and vis.accepted_tokens == vis.draft_tokens == len(foreign)
    assert hid.median_prob < 0.1 and hid.accepted_tokens < hid.draft_tokens
