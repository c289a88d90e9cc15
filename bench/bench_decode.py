"""Our base decode vs ``model.generate()`` greedy, side by side in one run (same model, prompt, budget).

    python bench/bench_decode.py                      # SmolLM2 on CPU, 64 new tokens, 5 rounds
    python bench/bench_decode.py model=tiny-llama new_tokens=128 rounds=7

Rounds alternate the two decoders (A B, B A, ...) so drift in machine load hits both alike; the
figure is the ratio of median tokens/s. Target: ratio >= 0.95 with identical output.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass

import torch

from streamgen.config import load, model_config
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.models.weights import load_model_and_tokenizer

PROMPT = ("Write a Python function `running_mean(xs, k)` that returns the list of means of every window of "
          "k consecutive numbers in xs. Explain the algorithm briefly.")


@dataclass(frozen=True)
class BenchConfig:
    model: str = "smollm2"
    new_tokens: int = 64
    rounds: int = 5
    threads: int = 1


def main(argv: list[str]) -> None:
    cfg = load(BenchConfig, overrides=argv)
    torch.set_num_threads(cfg.threads)
    loaded = load_model_and_tokenizer(model_config(cfg.model))
    # No EOS: both sides decode exactly new_tokens tokens, so tokens/s compare like for like.
    ours = AutoregressiveDecoder(loaded.model, loaded.tokenizer, max_new_tokens=cfg.new_tokens, eos_token_ids=())
    messages = [{"role": "user", "content": PROMPT}]
    ids = torch.tensor([ours.render(messages)])

    def run_ours() -> tuple[list[int], float]:
        gen = ours.generate(messages)
        return list(gen.token_ids), gen.wall_s

    @torch.inference_mode()
    def run_hf() -> tuple[list[int], float]:
        start = time.perf_counter()
        out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=cfg.new_tokens, min_new_tokens=cfg.new_tokens,
                                    pad_token_id=loaded.tokenizer.pad_token_id or 0)
        return out[0, ids.shape[1]:].tolist(), time.perf_counter() - start

    run_ours(), run_hf()  # warm-up
    times: dict[str, list[float]] = {"ours": [], "generate": []}
    outputs: dict[str, list[int]] = {}
    for r in range(cfg.rounds):
        order = [("ours", run_ours), ("generate", run_hf)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            outputs[name], wall = fn()
            times[name].append(wall)
    tps = {k: cfg.new_tokens / statistics.median(v) for k, v in times.items()}
    print(f"model {cfg.model}, prompt {ids.shape[1]} tokens, {cfg.new_tokens} new tokens, {cfg.rounds} rounds, "
          f"{cfg.threads} thread(s)")
    for name in times:
        print(f"  {name:9s} median {statistics.median(times[name]):.3f} s  {tps[name]:7.2f} tokens/s  "
              f"(rounds: {', '.join(f'{t:.2f}' for t in times[name])})")
    print(f"  identical output: {outputs['ours'] == outputs['generate']}")
    print(f"  ratio ours/generate tokens/s: {tps['ours'] / tps['generate']:.3f}  (target >= 0.95)")


if __name__ == "__main__":
    main(sys.argv[1:])
