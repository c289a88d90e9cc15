"""Scripted models of every family: expected counts follow from docs/design.md, 'Accounting', and the model's design.

Every number below is a formula over the script (``SCRIPTS``: answer length, k, probabilities) and the
model YAML's decode settings, never a pinned output. ``A`` = answer tokens including EOS.
"""

from __future__ import annotations

import math
from contextlib import ExitStack

import pytest

from streamgen.acceptance_rules import Greedy, Threshold
from streamgen.config import ConfigError, model_config
from streamgen.families.registry import load_decoder
from streamgen.models.scripted import SCRIPTS, pool_tokens
from streamgen.stream import StreamRequest, run_pair
from tests.support.forward_count import counting_calls

SEGMENTS = ("Write a function that adds two numbers. ", "It should handle floats. ", "Use type hints.")
REQ = StreamRequest("ex", (), SEGMENTS)
BUDGET = 16
FAMILIES = ("ar", "refusion", "llada", "dream", "dgemma")
BIDIR = ("llada", "dream")
BEHAVIOURS = tuple(SCRIPTS)


@pytest.fixture(scope="module")
def decoders() -> dict[str, object]:
    return {f"{f}-{b}": load_decoder(model_config(f"scripted-{f}-{b}"), max_new_tokens=BUDGET)
            for f in FAMILIES for b in BEHAVIOURS}


def answer_tokens(behaviour: str) -> int:
    return SCRIPTS[behaviour].length + 1  # content + EOS


def base_forwards(family: str, decoder, a_tokens: int) -> int:
    """docs/design.md, 'Accounting'. AR: 1 prefill + 1 per further token. ReFusion with slot_threshold 1.0: one slot per
    round, 2 forwards per round. LLaDA: steps per block × blocks — the official sampler fills every block,
    also the one after the block holding the answer.
    DiffusionGemma: ⌈A / canvas⌉ canvases, each one encoder call (the request, then the previous canvas)
    + s_min decoder calls (the scripted argmax is stable from the first step, the confidence threshold
    is out of reach: the stability rule stops every canvas at stability_threshold + 1)."""
    if family == "ar":
        return a_tokens
    if family == "refusion":
        return 2 * math.ceil(a_tokens / decoder.settings.slot_size)
    if family == "dgemma":
        return math.ceil(a_tokens / decoder.canvas) * (1 + dgemma_steps(decoder))
    return decoder.geometry.steps_per_block * decoder.geometry.num_blocks


def dgemma_steps(decoder) -> int:
    """Decoder calls per scripted canvas, from the YAML: the stability rule fires at step threshold + 1."""
    assert decoder.gc.confidence_threshold >= 100  # mean entropy never exceeds ln(vocab) < 100
    return decoder.settings.stability_threshold + 1


def residual_forwards(family: str, decoder, a_tokens: int, accepted: int) -> int:
    """A fully accepted finished draft costs the family's floor (the positions after a kept EOS lie
    after the answer); otherwise 1 verify + the decoding of positions accepted..end (AR: the verify
    yields token ``accepted``; diffusion: re-masked positions).
    LLaDA / Dream: 1 verify + for every block the official rate over its masked positions,
    ⌈m · steps_per_block / B⌉ with m = the block's positions at or after ``accepted`` (the sampler fills
    every block, the ones after the answer's too)."""
    if accepted == a_tokens:
        return decoder.min_residual_forwards
    if family in BIDIR:
        g = decoder.geometry
        masked = [g.block_length - min(max(accepted - lo, 0), g.block_length)
                  for lo in range(0, g.gen_length, g.block_length)]
        return 1 + sum(math.ceil(m * g.steps_per_block / g.block_length) for m in masked)
    if family == "ar":
        return a_tokens - accepted
    if family == "refusion":
        return 1 + 2 * math.ceil((a_tokens - accepted) / decoder.settings.slot_size)
    if family == "dgemma":  # verify (2) + canvases from the first rejected one to the EOS's, encoders between
        canvases = (a_tokens - 1) // decoder.canvas - accepted // decoder.canvas + 1
        return 2 + canvases * dgemma_steps(decoder) + canvases - 1
    raise AssertionError(family)


def expected_accepted(behaviour: str, tau: float | None) -> int:
    """constant: the whole draft; lastsegment: nothing; prefix: the k fixed tokens; calibrated: greedy
    keeps everything, τ cuts at the first position whose set probability is below τ."""
    s, a_tokens = SCRIPTS[behaviour], answer_tokens(behaviour)
    if behaviour == "lastsegment":
        return 0
    if behaviour == "prefix":
        return s.k
    if behaviour == "calibrated" and tau is not None:
        return next((j for j in range(a_tokens) if s.prob(j) < tau), a_tokens)
    return a_tokens


def test_lastsegment_design_precondition() -> None:
    """``lastsegment`` changes its first token iff the new segment's byte length is not a multiple of the
    pool size; these segments satisfy that (so 0 kept is a consequence of the design, not luck)."""
    assert all(len(s.encode()) % len(pool_tokens()) for s in SEGMENTS[1:])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
def test_counts_follow_from_the_design(decoders, family: str, behaviour: str) -> None:
    d = decoders[f"{family}-{behaviour}"]
    out = run_pair(d, REQ, Greedy(), base_first=True)
    a_tokens = answer_tokens(behaviour)
    assert len(out.base.token_ids) == a_tokens and out.base.finished
    assert out.stream.token_ids == out.base.token_ids  # greedy, self-consistent model: lossless
    # the floor = verify + one decoding unit (docs/diffusion.md): AR 1; ReFusion 1 + a round of 2; LLaDA 1 + a
    # step; DiffusionGemma 2 (encoder + decoder) + one canvas at its fewest steps
    floor = {"ar": 1, "refusion": 3, "llada": 2, "dream": 2}.get(family) or 2 + dgemma_steps(d)
    assert d.min_residual_forwards == floor
    if not (family == "refusion" and behaviour == "calibrated"):  # set probabilities reorder its slots
        assert out.base.forwards == base_forwards(family, d, a_tokens)
    for step in out.steps[1:]:
        accepted = expected_accepted(behaviour, None)
        assert (step.draft_tokens_in, step.accepted_tokens) == (a_tokens, accepted)
        assert step.answer.forwards == residual_forwards(family, d, a_tokens, accepted)
    kept_whole = out.final.accepted_tokens == out.final.draft_tokens_in
    assert kept_whole == (behaviour in ("constant", "calibrated"))
    assert out.residual_forwards >= d.min_residual_forwards
    if kept_whole:  # the floor, every family (LLaDA / Dream: the buffer after the kept EOS is not refilled)
        assert out.residual_forwards == d.min_residual_forwards
        if family in BIDIR:  # the path: the verify pass, then the one confirming step (base ran first)
            assert [c.kind for c in d.meter.calls[-2:]] == ["verify_visible", "denoise"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tau", [0.5, 0.7, 0.9, 0.96])
def test_calibrated_tau_cuts_at_the_designed_position(decoders, family: str, tau: float) -> None:
    d = decoders[f"{family}-calibrated"]
    out = run_pair(d, REQ, Threshold(tau), base_first=False)
    cut = expected_accepted("calibrated", tau)
    assert 0 < cut < answer_tokens("calibrated")  # every τ here cuts inside the draft
    assert [s.accepted_tokens for s in out.steps[1:]] == [cut, cut]
    assert out.stream.token_ids == out.base.token_ids  # regenerating re-emits the same scripted tokens
    if family != "refusion":
        assert out.residual_forwards == residual_forwards(family, d, answer_tokens("calibrated"), cut)


# paths each family's meter must see, and the overrides that reach them on a scripted model
PATHS = {
    "ar": ({"prefill", "verify", "decode"}, ["scripted-ar-prefix"]),
    "refusion": ({"plan", "verify", "verify_stream", "infill_predict", "infill_verify"},
                 ["scripted-refusion-prefix", "scripted-refusion-calibrated:decoding.token_threshold=0.7"]),
    "llada": ({"denoise", "verify_visible", "verify_hidden"},
              ["scripted-llada-prefix", "scripted-llada-constant:decoding.verifier_mode=hidden"]),
    "dream": ({"denoise", "verify_visible", "verify_hidden"},
              ["scripted-dream-prefix", "scripted-dream-constant:decoding.verifier_mode=hidden"]),
    # base encode/denoise, verify encode/decode in both modes, regenerate (prefix), confirm (constant)
    "dgemma": ({"encode", "denoise", "verify_encode", "verify_visible", "verify_hidden"},
               ["scripted-dgemma-prefix", "scripted-dgemma-constant:decoding.verifier_mode=hidden"]),
}


def counting_model_calls(stack: ExitStack, d) -> list:
    """Hook counters on the modules a family calls: DiffusionGemma's encoder and decoder halves, else the model."""
    halves = getattr(getattr(d.model, "model", None), "encoder", None)
    modules = [d.model.model.encoder, d.model.model.decoder] if halves is not None else [d.model]
    return [stack.enter_context(counting_calls(m)) for m in modules]


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_hook_count_equals_the_meter_on_every_path(family: str) -> None:
    """An independent count of real module calls (forward pre-hook) equals ForwardMeter's, per base run
    and per stream step, and together the runs take every path of the family."""
    expected, names = PATHS[family]
    seen: set[str] = set()
    for spec in names:
        name, _, override = spec.partition(":")
        d = load_decoder(model_config(name, [override] if override else []), max_new_tokens=BUDGET)
        with ExitStack() as stack:
            counts = counting_model_calls(stack, d)
            base = d.generate(REQ.messages())
        assert sum(c.calls for c in counts) == base.forwards == len(d.meter.calls)
        session, draft = d.open_stream(), ()
        for i in range(1, len(SEGMENTS) + 1):
            before = len(d.meter.calls)
            with ExitStack() as stack:
                counts = counting_model_calls(stack, d)
                step = session.step(REQ.messages(i), draft, Greedy())
            assert sum(c.calls for c in counts) == step.answer.forwards == len(d.meter.calls) - before > 0
            draft = step.answer.token_ids
        seen |= {c.kind for c in d.meter.calls}
    assert seen == expected


def test_unknown_behaviour_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="scripted behaviour 'nope'.*calibrated"):
        load_decoder(model_config("scripted-ar-constant", ["path=nope"]))
