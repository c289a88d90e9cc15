"""The diffusion decoders follow the official samplers: same tokens, same forwards (issue 26).

Each decoder is compared with the deliberately simple reimplementation of its official procedure in
``tests/support/official_samplers.py`` on tiny random fp32 models, over several (generation length, block,
steps) settings, with and without an early EOS; forward counts are also checked against the official
procedure's formula written here. Every project difference is an option, off by default; each is
shown to change what it names.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from streamgen.config import ConfigError, model_config
from streamgen.families.bidirectional.sampler import (
    DEVIATIONS,
    BidirSettings,
    dream_transfer_count,
    geometry,
    llada_transfer_counts,
)
from streamgen.families.refusion.decoder import DEVIATIONS as REFUSION_DEVIATIONS
from streamgen.families.refusion.decoder import (
    ReFusionSettings,
    SlotGeometry,
    refusion_eos_ids,
    slot_geometry,
)
from streamgen.families.registry import FAMILIES, load_decoder
from tests.support.official_samplers import dream_generate, llada_generate, refusion_generate

ADDS = [{"role": "user", "content": "Write a function that adds two numbers."}]
HASH = [{"role": "user", "content": "Can you explain how a hash table works? Make it short."}]


def _decoder(name: str, *overrides: str, max_new_tokens: int = 32):
    return load_decoder(model_config(name, list(overrides)), max_new_tokens=max_new_tokens)


def _cut(answer: list[int], eos_ids: frozenset[int]) -> list[int]:
    """The answer as the official evals read it: through the first EOS (their stop sequence)."""
    end = next((i + 1 for i, t in enumerate(answer) if t in eos_ids), len(answer))
    return answer[:end]


def _early_eos(d, messages) -> int:
    """An id the model first writes at its answer's position 3 or later (the first such): configured as an
    extra EOS, it ends the answer there, early but not at once."""
    tokens = list(d.generate(messages).token_ids)
    return next(t for i, t in enumerate(tokens) if i >= 3 and t not in tokens[:i])


# -- LLaDA ---------------------------------------------------------------------------------------


def test_llada_transfer_counts_for_gen_32_steps_10():
    """gen 32, one block, 10 steps: ⌊32/10⌋ = 3 per step, the 32 mod 10 = 2 first steps one more."""
    assert llada_transfer_counts(32, 10) == [4, 4] + [3] * 8
    for m, s in ((16, 8), (7, 4), (3, 8), (0, 5)):
        counts = llada_transfer_counts(m, s)
        assert len(counts) == s and sum(counts) == m and counts == sorted(counts, reverse=True)
        assert max(counts) - min(counts) <= 1


LLADA_SETTINGS = [  # (gen_length, block_length, steps)
    (32, 32, 10), (32, 16, 8), (32, 8, 16), (24, 8, 6), (32, 32, 32),
]


@pytest.mark.parametrize("gen,block,steps", LLADA_SETTINGS)
@pytest.mark.parametrize("early_eos", [False, True])
def test_llada_base_run_equals_the_official_sampler(gen, block, steps, early_eos):
    """Tokens equal to the official sampler's; forwards = blocks × steps per block = steps, also when an
    EOS ends the answer in the first block (every block is still filled)."""
    overrides = [f"decoding.gen_length={gen}", f"decoding.block_length={block}", f"decoding.steps={steps}"]
    d = _decoder("tiny-llada", *overrides)
    if early_eos:
        d = _decoder("tiny-llada", *overrides, f"decoding.eos_token_ids=[{_early_eos(d, ADDS)}]")
    want, trace = llada_generate(d.model, d.text.render(ADDS), steps=steps, gen_length=gen, block_length=block,
                                 mask_id=d.mask_id)
    got = d.generate(ADDS)
    assert list(got.token_ids) == _cut(want, d.eos_ids)
    assert got.forwards == trace.calls == (gen // block) * (steps // (gen // block)) == steps
    assert got.finished == early_eos and (len(got.token_ids) < gen) == early_eos


@pytest.mark.parametrize("flag", ["logits_eos_inf", "confidence_eos_eot_inf"])
def test_llada_eos_knobs_of_the_eval_scripts(flag):
    """EVAL.md's logits_eos_inf / confidence_eos_eot_inf: the listed ids' logits are -inf before the
    argmax / in the confidence; the tokens follow the official sampler with the same flag."""
    d = _decoder("tiny-llada", "decoding.gen_length=16", "decoding.block_length=16", "decoding.steps=8")
    common = sorted(set(d.generate(ADDS).token_ids), key=list(d.generate(ADDS).token_ids).count)[-2:]
    key = "logits_inf_ids" if flag == "logits_eos_inf" else "confidence_inf_ids"
    on = _decoder("tiny-llada", "decoding.gen_length=16", "decoding.block_length=16", "decoding.steps=8",
                  f"decoding.{key}={common}")
    want, _ = llada_generate(on.model, on.text.render(ADDS), steps=8, gen_length=16, block_length=16,
                             mask_id=on.mask_id, **{flag: tuple(common)})
    got = on.generate(ADDS)
    assert list(got.token_ids) == want
    if flag == "logits_eos_inf":
        assert not set(common) & set(got.token_ids)
    assert got.token_ids != d.generate(ADDS).token_ids


# -- Dream ---------------------------------------------------------------------------------------


def test_dream_transfer_count_formula():
    """int(n (1 − s/t)) on linspace(1, eps, steps + 1); everything left at the last step."""
    steps, eps, n = 10, 1e-3, 32
    ts = [1 + (eps - 1) * i / steps for i in range(steps + 1)]
    for i in range(steps - 1):
        assert dream_transfer_count(n, i, steps, eps) in {int(n * (1 - ts[i + 1] / ts[i])) + d for d in (-1, 0)}
    assert dream_transfer_count(n, steps - 1, steps, eps) == n


@pytest.mark.parametrize("steps", [32, 16, 10, 7])
@pytest.mark.parametrize("alg,top_k", [("entropy", 50), ("maskgit_plus", 50), ("topk_margin", 50),
                                       ("entropy", 0), ("maskgit_plus", 0)])
def test_dream_base_run_equals_the_official_sampler(steps, alg, top_k):
    """Dream's _sample: one forward per step (steps in all), positions ranked by the confidence of the
    distribution left after the top-50 filter (diffusion_generate's inherited default; 0: none)."""
    d = _decoder("tiny-dream", f"decoding.steps={steps}", f"decoding.remasking={alg}", f"decoding.top_k={top_k}")
    want, trace = dream_generate(d.model, d.text.render(ADDS), steps=steps, max_new_tokens=32, mask_id=d.mask_id,
                                 alg=alg, top_k=top_k or None)
    got = d.generate(ADDS)
    assert list(got.token_ids) == _cut(want, d.eos_ids) and got.forwards == trace.calls == steps


def test_dream_top_k_changes_the_reveal_order():
    """The top-50 confidence is not the whole vocabulary's: on this model the two orders differ."""
    a = _decoder("tiny-dream", "decoding.top_k=0", "decoding.remasking=entropy").generate(ADDS).token_ids
    b = _decoder("tiny-dream", "decoding.remasking=entropy").generate(ADDS).token_ids
    assert a != b


def test_dream_top_p_follows_the_official_filter():
    d = _decoder("tiny-dream", "decoding.top_p=0.05", "decoding.steps=8", "decoding.remasking=maskgit_plus")
    want, _ = dream_generate(d.model, d.text.render(ADDS), steps=8, max_new_tokens=32, mask_id=d.mask_id,
                             alg="maskgit_plus", top_p=0.05)
    assert list(d.generate(ADDS).token_ids) == _cut(want, d.eos_ids)


# -- both bidirectional styles: prompt masks, mask argmax ----------------------------------------


@pytest.mark.parametrize("name", ["tiny-llada", "tiny-dream"])
def test_a_mask_id_in_the_request_is_a_masked_position(name, monkeypatch):
    """The official samplers treat every mask id in the sequence as masked, the request's too: such a
    position competes for reveals (here it is revealed) and the answer follows the official sampler."""
    d = _decoder(name, "decoding.steps=32")
    render = d.text.render
    monkeypatch.setattr(d.text, "render", lambda m: [*render(m)[:3], d.mask_id, *render(m)[3:]])
    prompt = d.text.render(ADDS)
    if name == "tiny-llada":
        want, _ = llada_generate(d.model, prompt, steps=32, gen_length=32, block_length=16, mask_id=d.mask_id)
    else:
        want, _ = dream_generate(d.model, prompt, steps=32, max_new_tokens=32, mask_id=d.mask_id, alg="entropy")
    buf = d._buffer(ADDS)
    assert buf.prompt_masked == [3]
    d.denoise(buf)
    assert buf.prompt_masked == [] and buf.prompt[3] != d.mask_id  # revealed like any masked position
    assert [d.mask_id if t is None else t for t in buf.answer] == want
    fixed = _decoder(name, "decoding.steps=32", "decoding.fixed_prompt_masks=true")
    monkeypatch.setattr(fixed.text, "render", d.text.render)
    kept = fixed._buffer(ADDS)
    fixed.denoise(kept)
    assert kept.prompt_masked == [] and kept.prompt[3] == d.mask_id


@pytest.mark.parametrize("name", ["tiny-llada", "tiny-dream"])
def test_a_position_whose_argmax_is_the_mask_stays_masked(name):
    """Full-vocabulary argmax: with the mask id's logit raised everywhere nothing is ever revealed (the
    answer is all mask ids, as the official output); suppress_mask_logit (off by default) reveals."""
    d = _decoder(name, "decoding.steps=8")
    on = _decoder(name, "decoding.steps=8", "decoding.suppress_mask_logit=true")
    for dec in (d, on):
        _favour_the_mask(dec.model, dec.mask_id)
    got = d.generate(ADDS)
    assert set(got.token_ids) == {d.mask_id} and len(got.token_ids) == 32 and not got.finished
    assert got.forwards == 8 and got.text == ""
    assert d.mask_id not in on.generate(ADDS).token_ids


def _favour_the_mask(model, mask_id: int) -> None:
    """The mask id's logit raised by 1e4 at every position, every other logit as the model gives it."""
    forward = model.forward

    def favoured(*args, **kwargs):
        out = forward(*args, **kwargs)
        out.logits[..., mask_id] += 1e4
        return out

    model.forward = favoured


# -- ReFusion ------------------------------------------------------------------------------------


REFUSION_SETTINGS = [  # (gen_length, slot_size, serial_num_blocks, slot_threshold, token_threshold)
    (32, 4, 2, 0.9, 0.4), (32, 4, 4, 1.0, 0.2), (30, 4, 2, 1.0, 0.0), (32, 8, 2, 1.0, 1.0),
    (32, 4, 1, 0.0, 0.0), (24, 4, 3, 0.9, 0.3),
]


def _refusion(gen, slot, blocks, slot_t, tok_t, *extra):
    return _decoder("tiny-refusion", f"decoding.gen_length={gen}", f"decoding.slot_size={slot}",
                    f"decoding.serial_num_blocks={blocks}", f"decoding.slot_threshold={slot_t}",
                    f"decoding.token_threshold={tok_t}", *extra)


@pytest.mark.parametrize("gen,slot,blocks,slot_t,tok_t", REFUSION_SETTINGS)
@pytest.mark.parametrize("messages", [ADDS, HASH], ids=["adds", "hash"])
@pytest.mark.parametrize("early_eos", [False, True])
def test_refusion_base_run_equals_the_official_sampler(gen, slot, blocks, slot_t, tok_t, messages, early_eos):
    """Tokens and forwards equal generate_refusion's: block = (gen_length padded to slots) / serial_num_blocks,
    the plan's argmax over the whole vocabulary, the tokenizer's EOS (early_eos: plus an id the model
    writes early, so the EOS paths run)."""
    d = _refusion(gen, slot, blocks, slot_t, tok_t)
    if early_eos:
        d = _refusion(gen, slot, blocks, slot_t, tok_t, f"decoding.eos_token_ids=[{_early_eos(d, messages)}]")
    assert d.gen_length == gen + (-gen) % slot and d.block_length == d.gen_length // blocks
    want, trace = refusion_generate(d.model, d.text.render(messages), gen_length=gen, slot_size=slot,
                                    serial_num_blocks=blocks, slot_threshold=slot_t, token_threshold=tok_t,
                                    mask_id=d.mask_id, eos_token_id=d.eos_ids)
    assert max(trace.infill_rows, default=1) == 1  # where the no-cache reference is exact
    got = d.generate(messages)
    assert list(got.token_ids) == _cut(want, d.eos_ids) and got.forwards == trace.calls
    assert got.finished == (d.eos_ids & set(want) != set())


def test_refusion_settings_take_both_paths_and_an_eos():
    """The settings above reach infill, whole-slot commits and an EOS inside a round (a test proves
    nothing about a path it never takes)."""
    kinds, ended = set(), 0
    for setting in REFUSION_SETTINGS:
        d = _refusion(*setting)
        d = _refusion(*setting, f"decoding.eos_token_ids=[{_early_eos(d, ADDS)}]")
        gen = d.generate(ADDS)
        ended += gen.finished and len(gen.token_ids) < d.gen_length
        kinds |= {c.kind for c in d.meter.calls}
    assert {"plan", "verify", "infill_predict", "infill_verify"} <= kinds and ended >= 3


def test_refusion_plans_over_the_whole_vocabulary():
    """generate_refusion's plan takes the argmax over the whole vocabulary: with the mask id's logit raised
    everywhere, every slot drafts (and commits) mask ids, as the official sampler does; with
    suppress_mask_logit (off by default) no mask id is planned."""
    d = _refusion(32, 4, 2, 0.9, 0.4)
    on = _refusion(32, 4, 2, 0.9, 0.4, "decoding.suppress_mask_logit=true")
    for dec in (d, on):
        _favour_the_mask(dec.model, dec.mask_id)
    want, trace = refusion_generate(d.model, d.text.render(ADDS), gen_length=32, slot_size=4, serial_num_blocks=2,
                                    slot_threshold=0.9, token_threshold=0.4, mask_id=d.mask_id,
                                    eos_token_id=d.eos_ids)
    got = d.generate(ADDS)
    assert list(got.token_ids) == want == [d.mask_id] * 32 and got.forwards == trace.calls == 2 * 2
    assert d.mask_id not in on.generate(ADDS).token_ids


def test_refusion_geometry():
    """Padded to a slot multiple, cut into serial_num_blocks blocks of whole slots; refusion-8b: 512 / 4."""
    assert slot_geometry(ReFusionSettings(slot_size=4, serial_num_blocks=2, gen_length=30), 16) == SlotGeometry(32, 16)
    big = ReFusionSettings(**{k: v for k, v in model_config("refusion-8b").decoding.items() if k != "per_benchmark"})
    assert slot_geometry(big, 256) == SlotGeometry(512, 128)  # not capped at the budget
    with pytest.raises(ConfigError, match="serial_num_blocks"):
        slot_geometry(ReFusionSettings(slot_size=4, serial_num_blocks=3, gen_length=32), 32)
    assert slot_geometry(ReFusionSettings(slot_size=4, gen_length=64, cap_gen_length=True, block_length=16), 24) == SlotGeometry(24, 16)


def test_refusion_eos_set():
    """The tokenizer's eos_token_id (plus eos_token_ids); stop_on_every_eos adds every id the configs name."""
    class Tok:
        eos_token_id = 7

    assert refusion_eos_ids(Tok(), ReFusionSettings(), (7, 9, 11)) == {7}
    assert refusion_eos_ids(Tok(), ReFusionSettings(eos_token_ids=(5,)), (7, 9)) == {5, 7}
    assert refusion_eos_ids(Tok(), ReFusionSettings(stop_on_every_eos=True), (7, 9, 11)) == {7, 9, 11}


# -- the differences: options, off by default, in the fingerprint -----------------------------------


def test_every_difference_is_an_option_off_by_default():
    bidir = {f.name: f.default for f in fields(BidirSettings)}
    refusion = {f.name: f.default for f in fields(ReFusionSettings)}
    assert DEVIATIONS and all(bidir[k] == v for k, v in DEVIATIONS.items()) and not any(DEVIATIONS.values())
    assert REFUSION_DEVIATIONS and all(refusion[k] == v for k, v in REFUSION_DEVIATIONS.items())
    assert not any(REFUSION_DEVIATIONS.values())


def test_stop_after_eos_block_is_the_former_cheaper_base_run():
    """Off: every block is filled (2 blocks × 8 steps); on: the base run stops after the block holding
    the first EOS, block 1 here (8 forwards)."""
    eos = _early_eos(_decoder("tiny-llada"), ADDS)
    full = _decoder("tiny-llada", f"decoding.eos_token_ids=[{eos}]")
    short = _decoder("tiny-llada", f"decoding.eos_token_ids=[{eos}]", "decoding.stop_after_eos_block=true")
    a, b = full.generate(ADDS), short.generate(ADDS)
    assert a.token_ids == b.token_ids and a.finished
    assert (a.forwards, b.forwards) == (16, 8)


def test_cap_gen_length_caps_at_the_budget():
    assert geometry(BidirSettings(gen_length=64), 16).gen_length == 64
    assert geometry(BidirSettings(gen_length=64, cap_gen_length=True), 16).gen_length == 16
    with pytest.raises(ConfigError, match="block_length"):
        geometry(BidirSettings(block_length=16), 24)
    with pytest.raises(ConfigError, match="steps"):
        geometry(BidirSettings(block_length=8, steps=6), 32)


@pytest.mark.parametrize("family,option", [("bidirectional", k) for k in DEVIATIONS]
                         + [("refusion", k) for k in REFUSION_DEVIATIONS])
def test_deviation_defaults_enter_the_fingerprint(family, option):
    from streamgen.config import benchmark_config
    from streamgen.results.cells import cell_settings

    name = {"bidirectional": "tiny-llada", "refusion": "tiny-refusion"}[family]
    s = cell_settings(model_config(name), benchmark_config("coedit"), acceptance="greedy", tau=None,
                      verifier_mode=None, max_new_tokens=16, limit=3)
    defaults = DEVIATIONS if family == "bidirectional" else REFUSION_DEVIATIONS
    assert s[f"model.decoding.{option}"] == defaults[option]


def test_a_buffer_the_official_sampler_refuses_is_a_problem_before_the_grid_starts():
    cfg = model_config("tiny-llada", ["decoding.gen_length=null"])
    problems = FAMILIES["bidirectional"].cell_problems(cfg, 20, "mbpp")
    assert problems and "block_length 16" in problems[0] and "mbpp" in problems[0]
    assert not FAMILIES["bidirectional"].cell_problems(cfg, 32, "mbpp")
    rf = model_config("tiny-refusion", ["decoding.serial_num_blocks=3"])
    assert "serial_num_blocks" in FAMILIES["refusion"].cell_problems(rf, 32, "coedit")[0]


@pytest.mark.parametrize("name", ["tiny-llada", "tiny-refusion"])
def test_the_context_check_counts_the_official_buffer_not_the_budget(name):
    """gen_length (32) is not capped at the budget (8), so the request must fit with 32 answer positions."""
    from streamgen.families.autoregressive.decoder import RequestTooLongError

    d = _decoder(name, max_new_tokens=8)
    d.text.max_context = len(d.text.render(ADDS)) + 16  # room for the budget, not for the buffer
    with pytest.raises(RequestTooLongError, match="answer budget 32"):
        d.generate(ADDS)
    d.text.max_context += 16
    assert len(d.generate(ADDS).token_ids) <= 32
