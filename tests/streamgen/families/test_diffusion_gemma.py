"""DiffusionGemma (transformers' block diffusion) on tiny random configs: parity with its own generate(),
hook-counted forwards, block-row verification (visible / hidden), the unrelated-draft probe, streaming."""

from __future__ import annotations

import pytest
import torch

from streamgen.acceptance_rules import Greedy, Threshold
from streamgen.config import ConfigError, model_config
from streamgen.decoding.base import Decoder
from streamgen.families.bidirectional.decoder import probe_unrelated
from streamgen.families.diffusion_gemma.canvas import block_rows
from streamgen.families.diffusion_gemma.decoder import DiffusionGemmaDecoder, dg_settings_from
from streamgen.families.registry import load_decoder

A = [{"role": "user", "content": "Write a function that adds two numbers. Then test it on a few inputs."}]
B = [{"role": "user", "content": "Can you explain how a hash table works? Make it short."}]
G = 24  # three canvases of 8
FAST = ("decoding.stability_threshold=0", "decoding.confidence_threshold=100.0")  # every canvas stops after 1 step


def _decoder(*overrides: str, max_new_tokens: int = G) -> DiffusionGemmaDecoder:
    return load_decoder(model_config("tiny-diffusiongemma", list(overrides)), max_new_tokens=max_new_tokens)


class Hooks:
    """Counts real module calls of the encoder and the decoder (forward pre-hooks)."""

    def __init__(self, model):
        self.enc = self.dec = 0
        self._h = [model.model.encoder.register_forward_pre_hook(lambda *a: self._bump("enc")),
                   model.model.decoder.register_forward_pre_hook(lambda *a: self._bump("dec"))]

    def _bump(self, which: str) -> None:
        setattr(self, which, getattr(self, which) + 1)

    def reset(self) -> None:
        self.enc = self.dec = 0

    def close(self) -> None:
        for h in self._h:
            h.remove()


def _meter_split(calls) -> tuple[int, int]:
    enc = sum(c.kind in ("encode", "verify_encode") for c in calls)
    return enc, len(calls) - enc


def _upstream(d: DiffusionGemmaDecoder, messages, seed: int, **kw) -> list[int]:
    ids = torch.tensor([d.text.render(messages)])
    torch.manual_seed(seed)
    out = d.model.generate(ids, max_new_tokens=d.gen_length, eos_token_id=sorted(d.eos_ids), **kw)
    new = out.sequences[0, ids.shape[1]:].tolist()
    eos = next((i for i, t in enumerate(new) if t in d.eos_ids), None)
    return new if eos is None else new[: eos + 1]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("messages", [A, B], ids=["A", "B"])
def test_base_decoding_equals_generate_token_for_token(seed, messages):
    d = _decoder(f"decoding.seed={seed}")
    hooks = Hooks(d.model)
    gen = d.generate(messages)
    ours = (hooks.enc, hooks.dec)
    hooks.reset()
    ref = _upstream(d, messages, seed, max_denoising_steps=d.gc.max_denoising_steps)
    assert list(gen.token_ids) == ref and len(ref) == G  # random weights never say EOS: 3 full canvases
    # the same calls upstream makes, each one metered: 3 encoder calls (request, canvas 1, canvas 2) and
    # max_denoising_steps decoder calls per canvas (random weights are never confident enough to stop)
    assert ours == (hooks.enc, hooks.dec) == _meter_split(d.meter.calls) == (3, 3 * d.gc.max_denoising_steps)
    assert gen.forwards == 3 + 3 * d.gc.max_denoising_steps
    hooks.close()


def test_the_denoising_loop_leaves_torch_global_state_as_it_found_it():
    """The loop seeds a forked RNG and switches torch.distributions' argument checks off (docs: both cost
    more than the sampler itself on tiny models); the caller's RNG stream and check setting survive."""
    import torch

    d = _decoder(*FAST)
    before = torch.distributions.Distribution._validate_args
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    d.generate(A)
    assert torch.equal(torch.rand(4), expected)
    assert torch.distributions.Distribution._validate_args is before


def test_parity_with_adaptive_stopping_and_an_eos():
    """Stopping fires after one step per canvas; an EOS inside canvas 2 ends the answer there."""
    d = _decoder(*FAST)
    first = d.generate(A).token_ids
    eos = first[G // 3 + 2]  # a token of canvas 2, taken from this run, declared an EOS
    assert eos not in first[: G // 3]
    d = _decoder(*FAST, f"decoding.eos_token_ids=[{eos}]")
    hooks = Hooks(d.model)
    gen = d.generate(A)
    ours = (hooks.enc, hooks.dec)
    hooks.reset()
    assert list(gen.token_ids) == _upstream(d, A, 0, stability_threshold=0, confidence_threshold=100.0)
    assert gen.finished and gen.token_ids[-1] == eos and len(gen.token_ids) <= 2 * d.canvas
    # request + canvas 1 encoded, 1 step per canvas, no encoder call after the finishing canvas
    assert gen.forwards == 2 + 2 and ours == (hooks.enc, hooks.dec) == _meter_split(d.meter.calls) == (2, 2)
    hooks.close()


def test_verify_rows_see_what_generation_gives_each_block():
    """Row b of the batched verify call == one decoder call on a generate()-shaped cache of request +
    blocks < b (sliding layers crossing their 24-token window included)."""
    d = _decoder()
    draft = [t for t in d.generate(B).token_ids if t not in d.eos_ids][:20]
    scored = d.score(A, draft, mode="hidden")
    p = len(scored.prompt)
    assert p + d.canvas > d.text_config.sliding_window  # the window is crossed, so its mask matters
    rows = block_rows(d, scored.cache, p, draft, "hidden")
    with torch.no_grad():
        batched = d.model(decoder_input_ids=rows.canvas, decoder_attention_mask=rows.masks, cache=rows.cache,
                          decoder_position_ids=rows.positions).logits
        for b in range(rows.canvas.shape[0]):
            cache = d.replay(scored.cache, p + b * d.canvas)
            single = d.model(decoder_input_ids=rows.canvas[b:b + 1], cache=cache,
                             decoder_position_ids=rows.positions[b:b + 1]).logits
            torch.testing.assert_close(batched[b], single[0], atol=1e-4, rtol=1e-4)


def _same(x, y) -> bool:
    return x == pytest.approx(y, abs=1e-6)


def test_visible_and_hidden_verification_differ_as_designed():
    """Swap one draft token inside block 1: earlier blocks never notice; the next block does in both modes
    (it reads block 1 through the causal encoder); block 1's own verdicts move only when the draft is visible."""
    d = _decoder()
    draft = [t for t in d.generate(B).token_ids if t not in d.eos_ids][:20]
    L, j = d.canvas, d.canvas + 3
    swapped = list(draft)
    swapped[j] = (draft[j] + 1) % 500
    others = [i for i in range(L, 2 * L) if i != j]
    for mode in ("visible", "hidden"):
        v1, v2 = (d.score(A, x, mode=mode).verification for x in (draft, swapped))
        assert _same(v1.probs[:L], v2.probs[:L]) and v1.argmax[:L] == v2.argmax[:L]
        assert not _same(v1.probs[2 * L:], v2.probs[2 * L:])
        moved = not _same([v1.probs[i] for i in others], [v2.probs[i] for i in others])
        assert moved == (mode == "visible"), mode
        if mode == "hidden":  # even position j's verdict ignores the token sitting there
            assert v1.argmax[L:2 * L] == v2.argmax[L:2 * L]


@pytest.mark.parametrize("mode", ["visible", "hidden"])
def test_unrelated_draft_probe(mode):
    d = _decoder(f"decoding.verifier_mode={mode}")
    foreign = d.generate(B).token_ids
    res = probe_unrelated(d, A, foreign, Threshold(0.01), mode=mode)
    ver = d.score(A, d.content(foreign), mode=mode).verification
    assert res.mode == mode and res.draft_tokens == len(d.content(foreign)) == G
    assert res.accepted_tokens == next((i for i, p in enumerate(ver.probs) if p < 0.01), len(ver.probs))
    assert res.median_prob == ver.median_prob


def test_stream_step_forwards_pins_and_hook_counts():
    d = _decoder(*FAST)
    assert isinstance(d, Decoder) and d.min_residual_forwards == 2 + 1
    hooks = Hooks(d.model)
    session = d.open_stream()
    draft = session.step(B, [], Greedy()).answer.token_ids
    assert _meter_split(d.meter.calls) == (hooks.enc, hooks.dec)
    for rule, mode in ((Threshold(0.0), "visible"), (Greedy(), "visible"), (Threshold(0.5), "hidden")):
        d.verifier_mode = mode
        start = len(d.meter.calls)
        hooks.reset()
        res = session.step(A, draft, rule)
        calls = d.meter.calls[start:]
        a, L = res.accepted_tokens, d.canvas
        assert [c.kind for c in calls[:2]] == ["verify_encode", f"verify_{mode}"]
        assert calls[1].tokens_fed == -(-len(d.content(draft)) // L) * L  # one canvas row per draft block
        assert _meter_split(calls) == (hooks.enc, hooks.dec) and res.answer.forwards == len(calls)
        assert list(res.answer.token_ids[:a]) == list(draft[:a])  # accepted run kept (whole blocks + pinned)
        if rule == Threshold(0.0):  # τ = 0 keeps the whole draft, which fills the budget: it is the answer
            assert a == res.draft_tokens_in == G and res.answer.token_ids == draft
            # verify + one confirming canvas of the fewest steps (1 with stability 0), nothing re-decided
            assert [c.kind for c in calls[2:]] == ["denoise"] * d.min_denoise_steps
            assert res.answer.forwards == d.min_residual_forwards == 2 + 1
            continue
        # after verify: canvases from block a // L to the last, 1 step each, encoder call between them
        regen = G // L - a // L
        assert res.answer.forwards == 2 + regen + (regen - 1)
    hooks.close()


def test_run_pair_end_to_end_with_greedy():
    from streamgen.stream import StreamRequest, run_pair

    d = _decoder()
    req = StreamRequest("ex1", (), ("Write a function that adds two numbers. ", "Then test it on a few inputs."))
    out = run_pair(d, req, Greedy(), base_first=True)
    # floor = verify (encoder + decoder) + the fewest steps of a canvas: the stability rule (threshold 1)
    # needs one earlier identical argmax canvas, so 2 steps
    assert out.min_residual_forwards == d.min_residual_forwards == 2 + min(d.gc.stability_threshold + 1,
                                                                           d.gc.max_denoising_steps) == 4
    assert out.base.forwards == 3 + 3 * d.gc.max_denoising_steps
    assert out.residual_forwards >= d.min_residual_forwards and len(out.steps) == 2


def test_bad_input_errors():
    with pytest.raises(ConfigError, match="verifier_mode"):
        dg_settings_from({"verifier_mode": "peek"})
    with pytest.raises(ConfigError, match="stepz"):
        dg_settings_from({"stepz": 3})
    with pytest.raises(ConfigError, match="max_denoising_steps"):
        dg_settings_from({"max_denoising_steps": 0})
    with pytest.raises(ConfigError, match="t_max"):
        _decoder("decoding.t_min=0.9", "decoding.t_max=0.5")
    d = _decoder()
    with pytest.raises(ValueError, match="non-empty draft"):
        d.score(A, [])
    with pytest.raises(ConfigError, match="visible or hidden"):
        d.score(A, [5, 6], mode="peek")
    with pytest.raises(ConfigError, match="source hub, local or tiny"):
        load_decoder(model_config("tiny-diffusiongemma", ["source=gguf", "path=x.gguf"]))


def test_configs_and_grid_plumbing():
    cfg = model_config("diffusiongemma-26b-a4b-it")
    assert cfg.family == "diffusion_gemma" and cfg.source == "hub" and cfg.dtype == "bfloat16"
    assert dg_settings_from(dict(cfg.decoding)).verifier_mode == "visible"
    # the grid sweeps verifier modes for this family as for LLaDA / Dream
    from jobs.grid.shards import expand_cells
    from streamgen.config import BenchmarkConfig, GridConfig

    tiny = model_config("tiny-diffusiongemma")
    grid = GridConfig(models=[tiny.name], benchmarks=["b"], acceptance=["greedy"], verifier_modes=["visible", "hidden"])
    bench = BenchmarkConfig(name="b", version="1", module="m", data_file="x", max_new_tokens=8)
    cells = expand_cells(grid, {tiny.name: tiny}, {"b": bench})
    assert sorted(c.verifier_mode for c in cells) == ["hidden", "visible"]


def test_regeneration_continues_from_the_accepted_blocks_as_generation_would():
    """τ = 0 accepts a draft one short of the budget (unfinished, so it is continued): the step's last
    canvas == denoising that canvas on a freshly encoded request + the two accepted whole blocks, with
    the rest of the run pinned."""
    d = _decoder(*FAST)
    draft = list(d.generate(B).token_ids)[: G - 1]
    res = d.open_stream().step(A, draft, Threshold(0.0))
    whole, a = 2 * d.canvas, G - 1
    assert res.accepted_tokens == res.draft_tokens_in == a and res.extra["accepted_whole_blocks"] == 2
    prompt = d.text.render(A)
    with d.seeded(), torch.inference_mode():
        cache = d.new_cache()
        d.encode(cache, [*prompt, *draft[:whole]], 0, "check")
        block = d.denoise_block(cache, [*prompt, *draft[:whole]], draft[whole:a])
    assert block[: a - whole] == draft[whole:a]
    assert list(res.answer.token_ids) == [*draft[:whole], *block][: len(res.answer.token_ids)]


@pytest.mark.gpu
def test_parity_on_cuda():
    """On a GPU the canvas noise and the sampling draw from the CUDA generator: still generate()'s tokens."""
    d = load_decoder(model_config("tiny-diffusiongemma"), device="cuda", max_new_tokens=G)
    gen = d.generate(A)
    ids = torch.tensor([d.text.render(A)], device="cuda")
    torch.manual_seed(0)
    out = d.model.generate(ids, max_new_tokens=G, eos_token_id=sorted(d.eos_ids),
                           max_denoising_steps=d.gc.max_denoising_steps)
    assert list(gen.token_ids) == out.sequences[0, ids.shape[1]:].tolist()[: len(gen.token_ids)]


def test_eos_ending_draft_kept_whole_is_the_answer_at_the_floor():
    """The EOS is a draft position: counted in and accepted; a kept-whole EOS-ending draft is the answer,
    verify + one confirming canvas of s_min steps (the draft's last block, pinned), nothing re-decided.
    Stability 1 and 4 steps: s_min = 2, while a canvas actually denoised runs all 4 (random weights never
    reach the confidence threshold), so confirming and re-deciding cost differently."""
    d = _decoder()
    eos = d.generate(A).token_ids[d.canvas + 2]  # a token of canvas 2, declared an EOS
    d = _decoder(f"decoding.eos_token_ids=[{eos}]")
    assert d.min_denoise_steps == 2 < d.gc.max_denoising_steps
    draft = d.generate(A).token_ids
    assert draft[-1] == eos and d.canvas < len(draft) < G  # ends inside canvas 2
    start = len(d.meter.calls)
    res = d.open_stream().step(A, draft, Threshold(0.0))
    assert res.draft_tokens_in == res.accepted_tokens == len(draft) and res.generated_tokens == 0
    assert res.answer.token_ids == draft and res.answer.finished
    kinds = [c.kind for c in d.meter.calls[start:]]
    assert kinds == ["verify_encode", "verify_visible"] + ["denoise"] * d.min_denoise_steps
    assert res.answer.forwards == d.min_residual_forwards
    # τ = 1 keeps nothing (shared rule), so the draft is decoded again from the request
    res = d.open_stream().step(A, draft, Threshold(1.0))
    assert res.accepted_tokens == 0 and res.answer.token_ids == draft and res.answer.forwards > d.min_residual_forwards
