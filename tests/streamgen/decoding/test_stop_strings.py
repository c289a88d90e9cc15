"""Stop strings (an lm-eval task's ``until``) end decoding, base run and stream steps alike, in every family.

Expected counts are the formulas of docs/design.md, 'Accounting' (tests/streamgen/models/test_scripted.py writes them per
family) with the answer length ``A`` the design gives: the tokens up to and including the one that
completes the stop string. The scripted ``constant`` answer is ``ABCDEF`` + EOS, one letter a token, so
the stop string ``CD`` spans two tokens and completes at token 4; the ``overrun`` script answers and runs
on into the next few-shot question (``…42.\\n\\nQuestion: …``), where ``\\n\\n`` is two tokens.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from streamgen.acceptance_rules import Greedy
from streamgen.config import benchmark_config, model_config
from streamgen.decoding.stops import stop_length
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.families.registry import load_decoder
from streamgen.models.scripted import SCRIPTS, Script, ScriptedLM, pool_tokens, text_tokens
from streamgen.models.tokenizers import tiny_tokenizer
from streamgen.stream import run_pair
from tests.streamgen.models.test_scripted import (
    BIDIR,
    BUDGET,
    FAMILIES,
    REQ,
    base_forwards,
    residual_forwards,
)

HEAD = "The answer is 42."
OVERRUN = HEAD + "\n\nQuestion: What is 6 times 7?"


def reference_stop(tokens: list[int], strings: list[str]) -> int | None:
    """The simple way: detokenise every prefix, the first whose text holds a string."""
    tok = tiny_tokenizer()
    return next((k for k in range(1, len(tokens) + 1) if any(s in tok.decode(tokens[:k]) for s in strings)), None)


def test_stop_length_equals_the_prefix_by_prefix_reference() -> None:
    tok, rng = tiny_tokenizer(), random.Random(0)
    words = ["42", ".", "\n", "\n\n", "Question", ":", " Q", "A", "###", " is", "é"]
    for _ in range(200):
        ids = text_tokens("".join(rng.choice(words) for _ in range(rng.randint(0, 12))))
        strings = rng.sample(["\n\n", "Question:", "Q:", "A.", "é\n"], rng.randint(1, 3))
        assert stop_length(ids, strings, tok.decode) == reference_stop(ids, strings), (ids, strings)
    assert stop_length(text_tokens("abc"), [""], tok.decode) is None  # an empty string stops nothing


@pytest.fixture(scope="module")
def overrun() -> AutoregressiveDecoder:
    model = ScriptedLM(Script("overrun", text=OVERRUN), bidirectional=False, mask_token_id=len(tiny_tokenizer()) - 1)
    return AutoregressiveDecoder(model.eval(), tiny_tokenizer(), max_new_tokens=64)


def test_autoregressive_stops_after_the_token_completing_the_string_base_and_stream(overrun) -> None:
    answer, newline = text_tokens(OVERRUN), text_tokens("\n")
    head = text_tokens(HEAD)
    k = len(head) + 2  # the design: the head, then "\n" and "\n" as two tokens; the second completes "\n\n"
    assert answer[:k] == head + newline + newline and len(newline) == 1

    free = overrun.generate(REQ.messages())
    assert len(free.token_ids) == len(answer) + 1 and free.forwards == len(answer) + 1 and free.finished

    d = overrun.with_stop_strings(["\n\n", "Question:"])  # both occur; the earlier ends the answer
    out = run_pair(d, REQ, Greedy(), base_first=True)
    assert out.base.token_ids == tuple(answer[:k]) and out.base.stopped and not out.base.finished
    assert out.base.forwards == k  # 1 prefill (token 1) + 1 per further token, none past the stop
    assert out.base.text == HEAD + "\n\n"  # the scorer cuts the string off (lm-eval's postprocess)
    assert d.truncate_draft(free.token_ids) == answer[:k]  # a longer incoming draft is cut there, as at EOS
    assert out.stream.token_ids == out.base.token_ids
    assert out.steps[0].answer.forwards == k  # the first arrival decodes from scratch and stops there too
    for step in out.steps[1:]:  # the draft ends at the stop string: kept whole, it ended: 1 forward
        assert (step.draft_tokens_in, step.accepted_tokens, step.answer.forwards) == (k, k, 1)

    late = overrun.with_stop_strings(["Question:"])
    k2 = len(text_tokens(HEAD + "\n\nQuestion:"))  # ":" is its own last token here
    assert text_tokens(HEAD + "\n\nQuestion:") == answer[:k2]
    assert late.generate(REQ.messages()).forwards == k2


def test_a_special_tokens_text_stops_too_as_lm_evals_criteria_decode() -> None:
    """A chat model running on into a new turn: ``<|im_start|>`` is a special token (not EOS) that the
    answer's text skips; lm-eval's stop criteria decode with special tokens, so it stops there: A = 3."""
    tok = tiny_tokenizer()
    answer = text_tokens("42<|im_start|>user")
    k = len(text_tokens("42")) + 1
    assert tok.decode(answer[k - 1:k]) == "<|im_start|>" and answer[k - 1] != tok.eos_token_id
    model = ScriptedLM(Script("turn", text="42<|im_start|>user"), bidirectional=False, mask_token_id=len(tok) - 1)
    d = AutoregressiveDecoder(model.eval(), tok, max_new_tokens=64).with_stop_strings(["<|im_start|>"])
    out = d.generate(REQ.messages())
    assert out.token_ids == tuple(answer[:k]) and out.forwards == k and out.stopped
    assert out.text == "42"  # the answer's text skips special tokens, as the scorer reads it


@pytest.fixture(scope="module")
def constant() -> dict[str, object]:
    return {f: load_decoder(model_config(f"scripted-{f}-constant"), max_new_tokens=BUDGET).with_stop_strings(["CD"])
            for f in FAMILIES}


def test_the_design_puts_cd_across_tokens_three_and_four() -> None:
    tok, content = tiny_tokenizer(), list(pool_tokens()[: SCRIPTS["constant"].length])
    assert [tok.decode([t]) for t in content[:4]] == ["A", "B", "C", "D"]
    assert reference_stop(content, ["CD"]) == 4


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_ends_its_answer_at_the_stop_string_as_at_eos(constant, family: str) -> None:
    """A = 4 (``ABCD``, no EOS) in every formula: the base run's cost (LLaDA/Dream fill every block, so
    theirs is the stop-free count), and a kept-whole draft that ended at the stop string costs the floor."""
    d, a_tokens = constant[family], 4
    out = run_pair(d, REQ, Greedy(), base_first=True)
    assert out.base.token_ids == tuple(pool_tokens()[:a_tokens]) and out.base.stopped and not out.base.finished
    assert out.base.forwards == base_forwards(family, d, a_tokens)
    assert out.stream.token_ids == out.base.token_ids
    for step in out.steps[1:]:
        assert (step.draft_tokens_in, step.accepted_tokens) == (a_tokens, a_tokens)
        assert step.answer.forwards == residual_forwards(family, d, a_tokens, a_tokens) == d.min_residual_forwards


@pytest.mark.parametrize("family", FAMILIES)
def test_a_rejected_draft_is_decoded_again_up_to_the_stop_string(family: str) -> None:
    """``lastsegment``: the last segment changes every token, so nothing is kept; the stop string is the
    final answer's tokens 3–4 (from the design, read off a stop-free run), so the residual decode ends at
    A = 4 and costs the formula for 0 kept of an answer of 4."""
    free = load_decoder(model_config(f"scripted-{family}-lastsegment"), max_new_tokens=BUDGET)
    tokens = list(free.generate(REQ.messages()).token_ids)
    text = tiny_tokenizer().decode(tokens[2:4])
    assert reference_stop(tokens, [text]) == 4  # the string first completes at token 4
    d: Any = free.with_stop_strings([text])  # content(): every family's, not the protocol's
    assert d.content(tokens) == tokens[:4]  # the verify pass scores the draft through the string, as through EOS
    out = run_pair(d, REQ, Greedy(), base_first=False)
    assert out.base.token_ids == tuple(tokens[:4]) and out.base.stopped
    assert out.base.forwards == base_forwards(family, d, 4)
    assert out.final.accepted_tokens == 0 and out.stream.token_ids == out.base.token_ids
    assert out.residual_forwards == residual_forwards(family, d, 4, 0)


def test_without_stop_strings_nothing_changes() -> None:
    """Every benchmark but an lm-eval task has none: the decoders are the same objects, the cells' settings
    (fingerprints, shard ids) hold no stop-string key."""
    from streamgen.acceptance_rules import Greedy as G
    from streamgen.benchmarks.base import stop_strings
    from streamgen.results.cells import Cell

    for family in FAMILIES:
        d = load_decoder(model_config(f"scripted-{family}-constant"), max_new_tokens=BUDGET)
        assert d.with_stop_strings(()) is d and d.with_stop_strings([""]) is d
    for name in ("humaneval", "mbpp", "coedit", "chat"):
        cfg = benchmark_config(name)
        assert stop_strings(cfg) == ()
        cell = Cell(model_config("scripted-ar-constant"), cfg, G(), None, 16)
        assert not any("stop_strings" in key for key in cell.settings())
    assert set(BIDIR) <= set(FAMILIES)


def test_a_masked_position_ends_the_text_the_diffusion_families_look_in(constant) -> None:
    """``CD`` across a still-masked position is not a stop: the text after a mask is not known yet."""
    c, dd = pool_tokens()[2], pool_tokens()[3]
    for family in ("llada", "refusion", "dgemma"):
        d = constant[family]
        assert d.stop_length([c, dd]) == 2 and d.stop_length([c, None, dd]) is None
    llada = constant["llada"]
    assert llada.stop_length([c, llada.mask_id, dd]) is None


def test_dgemma_confirms_a_kept_whole_draft_that_ends_at_the_stop_string(constant, monkeypatch) -> None:
    """The intermediate fact behind the floor: a later step whose draft ``ABCD`` ended at the stop string
    and is kept whole emits it with one confirming canvas (``confirm``), and denoises nothing after it
    (no ``decode_from``); only the base run and step 1 (no draft) decode. On the scripted model a further
    canvas would cost the same forwards, so the count alone cannot tell the two apart."""
    d = constant["dgemma"]
    calls: list[str] = []
    confirm, decode_from = d.confirm, d.decode_from

    def spy(name: str, fn: Any) -> Any:
        return lambda *a, **k: (calls.append(name), fn(*a, **k))[1]

    monkeypatch.setattr(d, "confirm", spy("confirm", confirm))
    monkeypatch.setattr(d, "decode_from", spy("decode_from", decode_from))
    out = run_pair(d, REQ, Greedy(), base_first=True)
    later = len(out.steps) - 1
    assert later >= 2 and all(s.accepted_tokens == 4 for s in out.steps[1:])
    assert calls.count("confirm") == later
    assert calls.count("decode_from") == 2  # the base run and step 1
