"""ReFusion vs autoregressive decoding on the same tiny seeded Qwen3, and the streaming verify cost.

Prints, side by side in one run:
  1. forwards and wall clock per committed token, ReFusion (two threshold settings) vs the KV-cached
     autoregressive decoder on the same weights, and their ratios;
  2. the cost of one streaming verify pass (request + full draft, causal) relative to one plan pass;
  3. the unrelated-draft probe of paper §6.5 (median probability, accepted share, threshold 0.9) for the
     causal verifier and both bidirectional modes, on random tiny models and on a "copying" LLaDA-style
     model that reads its own token as trained LLaDA/Dream do on visible positions.

    python bench/bench_refusion.py [--gen 64] [--repeats 3] [--threads 1]

Random weights: ReFusion's confidences are low, so the reference thresholds (0.9/0.4) run mostly on
the infill path (its worst case); τ = 0/0 is its best case (every slot accepted by one verify).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from streamgen.acceptance_rules import Threshold
from streamgen.config import model_config
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.families.bidirectional.decoder import BidirectionalDecoder, BidirSettings, probe_unrelated
from streamgen.families.bidirectional.model import copying_bidir_model
from streamgen.families.refusion.decoder import ReFusionDecoder, ReFusionSettings
from streamgen.families.registry import load_decoder
from streamgen.models.tokenizers import tiny_tokenizer
from streamgen.models.weights import tiny_model

REQUESTS = [
    "Write a Python function that returns the sum of a list of integers.",
    "Can you explain how a hash table works? Make the text shorter and clearer.",
    "Given a string s, return the number of vowels in s.",
    "Fix the grammar in the following paragraph. The quick brown fox jumps over the lazy dog.",
]


def per_token(decoder, repeats: int) -> tuple[float, float, int]:
    """(forwards per committed token, seconds per committed token, tokens) over all requests."""
    fw, wall, toks = 0, 0.0, 0
    for _ in range(repeats):
        for text in REQUESTS:
            gen = decoder.generate([{"role": "user", "content": text}])
            fw, wall, toks = fw + gen.forwards, wall + gen.wall_s, toks + len(gen.token_ids)
    return fw / toks, wall / toks, toks


def verify_vs_plan(d: ReFusionDecoder, repeats: int) -> tuple[float, float, float, float]:
    """Mean wall (s) and tokens fed of one stream verify pass and of one plan pass."""
    d.meter.calls.clear()
    for _ in range(repeats):
        for text in REQUESTS:
            msgs = [{"role": "user", "content": text}]
            draft = d.content(d.generate(msgs).token_ids) or [7] * d.gen_length
            d.score(msgs, draft)
    plan = [c for c in d.meter.calls if c.kind == "plan"]
    ver = [c for c in d.meter.calls if c.kind == "verify_stream"]
    mean = lambda cs, f: statistics.mean(f(c) for c in cs)  # noqa: E731
    return (mean(ver, lambda c: c.wall_s), mean(plan, lambda c: c.wall_s),
            mean(ver, lambda c: c.tokens_fed), mean(plan, lambda c: c.tokens_fed))


def probe_table(gen: int) -> None:
    """Paper §6.5: score a draft answering another request (and, for contrast, the matched draft)."""
    req, other = [{"role": "user", "content": REQUESTS[0]}], [{"role": "user", "content": REQUESTS[1]}]
    tok = tiny_tokenizer()
    copying = BidirectionalDecoder(copying_bidir_model(len(tok), mask_token_id=511, eos_token_id=tok.eos_token_id),
                                   tok, BidirSettings(style="llada", mask_token_id=511), max_new_tokens=gen)
    rows = [("tiny-refusion (causal verifier)", load_decoder(model_config("tiny-refusion"), max_new_tokens=gen), None)]
    for name in ("tiny-llada", "tiny-dream"):
        for mode in ("visible", "hidden"):
            rows.append((f"{name} ({mode})", load_decoder(model_config(name), max_new_tokens=gen), mode))
    rows += [("copying llada (visible)", copying, "visible"), ("copying llada (hidden)", copying, "hidden")]
    print(f"{'verifier':<34}{'unrelated: median p':>20}{'accepted':>10}{'matched: median p':>19}{'accepted':>10}")
    for label, d, mode in rows:
        foreign = d.content(d.generate(other).token_ids) or [7] * 8
        own = d.content(d.generate(req).token_ids) or [7] * 8
        u = probe_unrelated(d, req, foreign, Threshold(0.9), mode=mode)
        m = probe_unrelated(d, req, own, Threshold(0.9), mode=mode)
        print(f"{label:<34}{u.median_prob:>20.3f}{f'{u.accepted_tokens}/{u.draft_tokens}':>10}"
              f"{m.median_prob:>19.3f}{f'{m.accepted_tokens}/{m.draft_tokens}':>10}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = tiny_model("qwen3", seed=0), tiny_tokenizer()
    ar = AutoregressiveDecoder(model, tok, max_new_tokens=args.gen)
    per_token(ar, 1)  # warm-up
    ar_fw, ar_s, ar_n = per_token(ar, args.repeats)
    print(f"tiny qwen3 (hidden 64, 2 layers), gen {args.gen}, {len(REQUESTS)} requests x {args.repeats}, "
          f"{args.threads} thread(s)")
    print(f"{'decoder':<34}{'fw/token':>10}{'ms/token':>10}{'tokens':>8}{'fw ratio':>10}{'wall ratio':>11}")
    print(f"{'autoregressive (KV cache)':<34}{ar_fw:>10.3f}{ar_s * 1e3:>10.3f}{ar_n:>8}{1.0:>10.2f}{1.0:>11.2f}")
    for st, tt in ((0.9, 0.4), (0.0, 0.0)):
        s = ReFusionSettings(slot_size=4, serial_num_blocks=max(1, args.gen // 16), slot_threshold=st,
                             token_threshold=tt, mask_token_id=511)
        rf = ReFusionDecoder(model, tok, s, max_new_tokens=args.gen)
        fw, sec, n = per_token(rf, args.repeats)
        label = f"refusion slot4/block16 τ {st}/{tt}"
        print(f"{label:<34}{fw:>10.3f}{sec * 1e3:>10.3f}{n:>8}{fw / ar_fw:>10.2f}{sec / ar_s:>11.2f}")
    rf = ReFusionDecoder(model, tok, ReFusionSettings(slot_size=4, serial_num_blocks=max(1, args.gen // 16),
                                                     mask_token_id=511),
                         max_new_tokens=args.gen)
    t0 = time.perf_counter()
    v_s, p_s, v_tok, p_tok = verify_vs_plan(rf, args.repeats)
    print(f"stream verify pass: {v_s * 1e3:.3f} ms, {v_tok:.0f} tokens fed; plan pass: {p_s * 1e3:.3f} ms, "
          f"{p_tok:.0f} tokens fed; verify/plan = {v_s / p_s:.2f}x wall, {v_tok / p_tok:.2f}x tokens "
          f"({time.perf_counter() - t0:.1f} s)")
    probe_table(min(args.gen, 32))


if __name__ == "__main__":
    main()
