"""LoRA training in float32 vs bf16 autocast (``train.autocast``) on SmolLM2-135M-Instruct, side by side.

    python bench/bench_adapt_autocast.py                          # 4 steps × 4 sequences (micro-batch 2), 2 threads
    python bench/bench_adapt_autocast.py --steps 8 --effective-batch 8   # issue 31's size: 4x the default's time
    python bench/bench_adapt_autocast.py --steps 2 --requests 4   # a quick look
    python bench/bench_adapt_autocast.py --max-rel-diff 0.01 train.learning_rate=1e-4   # any recipe key=value

The recipe is ``configs/adapt/smollm2-mbpp.yaml`` (LoRA r=8 on q,k,v,o_proj, its learning rate, dropout and
seed) with ``pairs.target=corpus``: prefix → MBPP answer pairs of the first ``--requests`` MBPP-train
requests, rendered as training renders them, so no teacher decoding is needed. Both runs go through
``streamgen.adapt.train.train`` from the same LoRA initialisation (a copy of one model) and read the same
pairs in the same order; steps alternate between them (A B, B A, ...) so drift in machine load hits both
alike. Printed per step: both losses, their relative difference |bf16 − fp32| / fp32 and seconds per
step; then the ratio of median seconds per step. Exits 1 if the difference exceeds ``--max-rel-diff`` at
any step.

The default is small because one sequence (~200 tokens, forward and backward through all 135M weights
to reach the adapters) cost 6-35 s on a 2-core box loaded by a test suite: there the default's
4 steps × 4 sequences × 2 runs took 8.9 min wall and 6 min of CPU (docs/adaptation.md).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from streamgen.adapt.config import AdaptConfig, adapt_config, validate_adapt
from streamgen.adapt.pairs import build_pairs
from streamgen.adapt.pipeline import encode
from streamgen.adapt.sources import load_requests
from streamgen.adapt.train import EncodedSet, lora_model, train
from streamgen.config import ConfigError, model_config, raise_if_problems
from streamgen.models.weights import load_model_and_tokenizer
from streamgen.requests.segment import SentenceSegmenter


def parse(argv: list[str]) -> tuple[argparse.Namespace, AdaptConfig]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per run")
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--effective-batch", type=int, default=4, help="sequences per optimizer step")
    ap.add_argument("--requests", type=int, default=12, help="MBPP-train requests the pairs are cut from")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--max-rel-diff", type=float, default=0.02, help="largest |bf16 - fp32| / fp32 loss allowed")
    ap.add_argument("overrides", nargs="*", help="recipe key=value overrides (configs/adapt/smollm2-mbpp.yaml)")
    args = ap.parse_args(argv)
    cfg = adapt_config("smollm2-mbpp", ["pairs.target=corpus", f"source.limit={args.requests}",
                                        f"train.steps={args.steps}", f"train.save_every={args.steps}",
                                        f"train.micro_batch={args.micro_batch}", "train.device=cpu",
                                        f"train.effective_batch={args.effective_batch}", *args.overrides])
    raise_if_problems(validate_adapt(cfg), "bad bench settings")
    return args, cfg


def training_data(cfg: AdaptConfig, model: object, tokenizer: object) -> EncodedSet:
    requests = load_requests(cfg.source, cfg.data_dir)
    pairs = build_pairs(requests, SentenceSegmenter(), cfg.pairs, {}, tokenizer.decode)  # type: ignore[attr-defined]
    return encode(cfg, pairs, model, tokenizer, "cpu")


def main(argv: list[str]) -> int:
    try:
        args, cfg = parse(argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    loaded = load_model_and_tokenizer(model_config(cfg.model))
    data = training_data(cfg, loaded.model, loaded.tokenizer)
    lengths = [len(p.input_ids) for p in data.pairs]
    fp32_model = lora_model(loaded.model, cfg.lora, cfg.train.seed)
    models = {"none": fp32_model, "bf16": copy.deepcopy(fp32_model)}  # the same initialisation
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
    print(f"{cfg.model} ({next(fp32_model.parameters()).dtype}), LoRA r={cfg.lora.rank} on "
          f"{','.join(cfg.lora.target_modules)}, lr {cfg.train.learning_rate:g}, dropout {cfg.lora.dropout}; "
          f"{len(data.pairs)} pairs from {args.requests} MBPP-train requests, {statistics.mean(lengths):.0f} "
          f"tokens mean, {max(lengths)} max; {cfg.train.steps} steps x {cfg.train.effective_batch} sequences "
          f"(micro-batch {cfg.train.micro_batch}); {torch.get_num_threads()} threads; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    losses: dict[str, list[float]] = {"none": [], "bf16": []}
    seconds: dict[str, list[float]] = {"none": [], "bf16": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {name: train(model, data, dataclasses.replace(cfg.train, autocast=name), Path(tmp) / name,
                            pad_id=pad, device="cpu") for name, model in models.items()}
        print(f"{'step':>4} {'fp32 loss':>10} {'bf16 loss':>10} {'rel diff':>9} {'fp32 s':>7} {'bf16 s':>7}")
        for step in range(cfg.train.steps):
            for name in ("none", "bf16") if step % 2 == 0 else ("bf16", "none"):
                start = time.perf_counter()
                losses[name].append(next(runs[name]).loss)
                seconds[name].append(time.perf_counter() - start)
            a, b = losses["none"][-1], losses["bf16"][-1]
            print(f"{step + 1:>4} {a:>10.5f} {b:>10.5f} {abs(b - a) / a:>9.2e} {seconds['none'][-1]:>7.1f} "
                  f"{seconds['bf16'][-1]:>7.1f}")
    fp32_s, bf16_s = statistics.median(seconds["none"]), statistics.median(seconds["bf16"])
    print(f"median s/step: fp32 {fp32_s:.1f}, bf16 {bf16_s:.1f}; speed ratio fp32/bf16 {fp32_s / bf16_s:.2f} "
          "(> 1: bf16 faster)")
    diffs = [abs(b - a) / a for a, b in zip(losses["none"], losses["bf16"], strict=True)]
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    print(f"largest relative loss difference {diffs[worst]:.2e} at step {worst + 1} (limit {args.max_rel_diff:g})")
    if diffs[worst] > args.max_rel_diff:
        print(f"error: bf16 autocast's loss differs from float32's by {diffs[worst]:.2e} > --max-rel-diff "
              f"{args.max_rel_diff:g} at step {worst + 1}: keep train.autocast=none for this recipe", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
