"""Verify cost on a real model: one forward over a 64-token draft vs decoding those 64 tokens one by one,
and the tokens each stream step feeds (request tokens not already cached + template suffix + draft).

    python bench/bench_verify.py                      # SmolLM2 on CPU, 64-token draft, 5 rounds
    python bench/bench_verify.py model=tiny-llama draft_tokens=32

Target: verify wall <= 0.25x the one-by-one decode wall. Both start from the same cached request.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

import torch

from streamgen.acceptance_rules import Greedy
from streamgen.config import load, model_config
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder, KVState
from streamgen.models.weights import load_model_and_tokenizer
from streamgen.requests.segment import segment
from streamgen.stream import StreamRequest, run_stream

REQUEST = ("Write a Python function that checks whether a string is a palindrome. Ignore case and spaces. "
           "Return True or False. Add a short docstring.")


@dataclass(frozen=True)
class BenchConfig:
    model: str = "smollm2"
    draft_tokens: int = 64
    rounds: int = 5
    threads: int = 1


@torch.inference_mode()
def time_verify_vs_decode(dec: AutoregressiveDecoder, request: list[int], draft: list[int]) -> tuple[float, float]:
    """(one verify forward over the draft, len(draft) single-token forwards), each on a cached request."""
    state = KVState()
    dec.forward(state, request, 1, "prefill")
    with dec.meter.span() as verify:
        dec.forward(state, draft, len(draft) + 1, "verify")
    state.rollback(len(request))
    with dec.meter.span() as one_by_one:
        for tok in draft:
            dec.forward(state, [tok], 1, "decode")
    assert verify.meter.forwards == 1 and one_by_one.meter.forwards == len(draft)
    return verify.wall_s, one_by_one.wall_s


def main(argv: list[str]) -> None:
    cfg = load(BenchConfig, overrides=argv)
    torch.set_num_threads(cfg.threads)
    loaded = load_model_and_tokenizer(model_config(cfg.model))
    dec = AutoregressiveDecoder(loaded.model, loaded.tokenizer, max_new_tokens=cfg.draft_tokens, eos_token_ids=())
    messages = [{"role": "user", "content": REQUEST}]
    request, draft = dec.render(messages), list(dec.generate(messages).token_ids)
    time_verify_vs_decode(dec, request, draft)  # warm-up
    pairs = [time_verify_vs_decode(dec, request, draft) for _ in range(cfg.rounds)]
    v, d = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    print(f"model {cfg.model}, request {len(request)} tokens (cached), draft {len(draft)} tokens, {cfg.rounds} rounds")
    print(f"  verify (1 forward, {len(draft)} tokens fed): median {v:.3f} s")
    print(f"  decode one by one ({len(draft)} forwards):  median {d:.3f} s")
    print(f"  ratio verify/decode: {v / d:.3f}  (target <= 0.25)")

    segments = tuple(segment(REQUEST))
    stream_dec = AutoregressiveDecoder(loaded.model, loaded.tokenizer, max_new_tokens=cfg.draft_tokens)
    steps = run_stream(stream_dec, StreamRequest("bench", (), segments), Greedy())
    print(f"\nstream run, {len(segments)} segments: tokens fed by each step's verify forward")
    print(f"  {'step':>4} {'request':>7} {'cached':>6} {'new+suffix':>10} {'draft':>5} {'verify_fed':>10} "
          f"{'accepted':>8} {'forwards':>8}")
    for i, st in enumerate(steps, 1):
        req, cached = int(st.extra["request_tokens"]), int(st.extra["cached_prefix_tokens"])
        print(f"  {i:>4} {req:>7} {cached:>6} {req - cached:>10} {st.draft_tokens_in:>5} "
              f"{int(st.extra['verify_tokens_fed']):>10} {st.accepted_tokens:>8} {st.answer.forwards:>8}")


if __name__ == "__main__":
    main(sys.argv[1:])
