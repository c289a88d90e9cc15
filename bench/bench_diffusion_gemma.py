"""DiffusionGemma beside the other families on tiny models: forwards per committed token, one verify pass
vs one denoising step, and the unrelated-draft probe.

Prints, side by side in one run:
  1. forwards and wall clock per committed token for tiny-llama (autoregressive), tiny-refusion,
     tiny-llada, tiny-dream and tiny-diffusiongemma (its YAML's 4 denoising steps, and transformers'
     default 48), each at the same answer budget;
  2. the cost of one stream verify pass (DiffusionGemma: encoder call + one batched decoder call over
     the draft's blocks; LLaDA: one full-attention call) against one denoising step of the same model;
  3. the unrelated-draft probe (paper §6.5, threshold 0.9) for DiffusionGemma's visible and hidden modes.

    python bench/bench_diffusion_gemma.py [--gen 32] [--repeats 2] [--threads 1]

Random weights: no denoising run is ever confident enough to stop early, so every canvas takes all its
steps (the worst case); forward counts are exact, wall clock is noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from bench_refusion import REQUESTS, per_token  # bench/ is on sys.path when run as a script

from streamgen.acceptance_rules import Threshold
from streamgen.config import model_config
from streamgen.families.bidirectional.decoder import probe_unrelated
from streamgen.families.registry import load_decoder

MODELS = [("tiny-llama", ()), ("tiny-refusion", ()), ("tiny-llada", ()), ("tiny-dream", ()),
          ("tiny-diffusiongemma", ()), ("tiny-diffusiongemma", ("decoding.max_denoising_steps=48",))]


def verify_vs_step(d, repeats: int, mode: str) -> dict[str, tuple[float, float]]:
    """Mean (wall ms, tokens fed) per call kind over verify passes on each request's own draft."""
    d.meter.calls.clear()
    for _ in range(repeats):
        for text in REQUESTS:
            msgs = [{"role": "user", "content": text}]
            draft = d.content(d.generate(msgs).token_ids) or [7] * 8
            d.score(msgs, draft, mode)
    out = {}
    for kind in sorted({c.kind for c in d.meter.calls}):
        calls = [c for c in d.meter.calls if c.kind == kind]
        out[kind] = (statistics.mean(c.wall_s for c in calls) * 1e3, statistics.mean(c.tokens_fed for c in calls))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"tiny models (hidden 64, 2 layers), gen {args.gen}, {len(REQUESTS)} requests x {args.repeats}, "
          f"{args.threads} thread(s)")
    print(f"{'decoder':<46}{'fw/token':>10}{'ms/token':>10}{'tokens':>8}{'min resid':>10}")
    decoders = {}
    for name, over in MODELS:
        d = load_decoder(model_config(name, list(over)), max_new_tokens=args.gen)
        if not decoders:  # warm-up once: the first model pays the imports
            per_token(d, 1)
        fw, sec, n = per_token(d, args.repeats)
        label = name + (f" [{over[0].split('.')[-1]}]" if over else "")
        print(f"{label:<46}{fw:>10.3f}{sec * 1e3:>10.3f}{n:>8}{getattr(d, 'min_residual_forwards', 1):>10}")
        decoders[label] = d
    print("one verify pass vs one denoising step (mean ms, mean tokens fed per call)")
    for label, mode in (("tiny-diffusiongemma", "visible"), ("tiny-diffusiongemma", "hidden"), ("tiny-llada", "visible")):
        d = decoders[label]
        d.generate([{"role": "user", "content": REQUESTS[0]}])
        step = [c for c in d.meter.calls if c.kind == "denoise"]
        step_ms = statistics.mean(c.wall_s for c in step) * 1e3
        stats = verify_vs_step(d, args.repeats, mode)
        verify_ms = sum(ms for kind, (ms, _) in stats.items() if kind.startswith("verify"))
        parts = ", ".join(f"{k} {ms:.2f} ms/{tok:.0f} tok" for k, (ms, tok) in stats.items() if k.startswith("verify"))
        print(f"  {label} ({mode}): verify {verify_ms:.2f} ms [{parts}]; denoise step {step_ms:.2f} ms, "
              f"{step[0].tokens_fed} tok; verify/step = {verify_ms / step_ms:.2f}x")
    d = decoders["tiny-diffusiongemma"]
    req, other = [{"role": "user", "content": REQUESTS[0]}], [{"role": "user", "content": REQUESTS[1]}]
    for mode in ("visible", "hidden"):
        u = probe_unrelated(d, req, d.generate(other).token_ids, Threshold(0.9), mode=mode)
        m = probe_unrelated(d, req, d.generate(req).token_ids, Threshold(0.9), mode=mode)
        print(f"  probe tiny-diffusiongemma ({mode}): unrelated median p {u.median_prob:.3f} "
              f"accepted {u.accepted_tokens}/{u.draft_tokens}; matched median p {m.median_prob:.3f} "
              f"accepted {m.accepted_tokens}/{m.draft_tokens}")


if __name__ == "__main__":
    main()
