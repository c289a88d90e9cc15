"""The prepared check for a lent GPU (one CUDA device, < 5 minutes): prints figures, changes nothing.

    python bench/gpu_check.py                          # on a CUDA machine: everything below
    python bench/gpu_check.py device=cpu models=[scripted-ar-prefix] requests=2 verify_model=tiny-llama  # dry run

1. For SmolLM2 and the tiny models (every family), in float32 and bfloat16: base and greedy stream runs
   of a few multi-sentence requests; the share of requests whose greedy stream answer equals the base
   answer, and among the others how many first differ at a near-tie (top-2 logit margin of the base
   run's distribution at that position below ``tie_margin``): numerical flips, not a procedure bug.
2. Per model and dtype: median speedup in forwards and in wall clock, and their ratio.
3. SmolLM2 (``verify_model``): one verify forward over a 64-token draft vs 64 single-token forwards on the same cached
   request (the paper's premise that verifying costs far less than decoding).

Without CUDA (and ``device=cuda``) it exits with status 2 and says so, before loading anything.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages, not an install

import torch  # noqa: E402
from bench_verify import time_verify_vs_decode  # noqa: E402  (bench/ is on the path: run as a script)

from streamgen.config import load, model_config  # noqa: E402
from streamgen.decoding.acceptance import Greedy  # noqa: E402
from streamgen.decoding.autoregressive import AutoregressiveDecoder  # noqa: E402
from streamgen.models import load_decoder  # noqa: E402
from streamgen.segment import segment  # noqa: E402
from streamgen.stream import StreamRequest, run_pair  # noqa: E402

REQUESTS = (
    "Write a Python function that checks whether a string is a palindrome. Ignore case and spaces. "
    "Return True or False.",
    "Write a function that returns the sum of a list of integers. It should handle empty lists. "
    "Return zero when the list is empty.",
    "Can you explain how a hash table works? Keep it short. Mention collisions.",
    "Fix the grammar in the following sentence. The quick brown fox jump over the lazy dogs. "
    "Make it formal.",
    "Write a function fib(n) that returns the n-th Fibonacci number. Use iteration. Add a docstring.",
    "What is the difference between a list and a tuple in Python? Give one example of each.",
)


@dataclass(frozen=True)
class CheckConfig:
    device: str = "cuda"
    models: list[str] = field(default_factory=lambda: [
        "smollm2", "tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-refusion", "tiny-llada", "tiny-dream",
        "scripted-ar-prefix", "scripted-refusion-prefix", "scripted-llada-prefix"])
    dtypes: list[str] = field(default_factory=lambda: ["float32", "bfloat16"])
    requests: int = 6
    max_new_tokens: int = 64
    tie_margin: float = 0.05  # logits; bf16 resolves about 2-3 significant digits
    verify_model: str = "smollm2"  # an autoregressive model; empty: skip part 3
    verify_draft_tokens: int = 64
    verify_rounds: int = 5


@dataclass
class ModelFigures:
    same: int = 0
    near_tie_flips: int = 0
    other_flips: int = 0
    speedup_forwards: list[float] = field(default_factory=list)
    speedup_wall: list[float] = field(default_factory=list)


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@torch.inference_mode()
def top2_margin(decoder: object, messages: list[dict[str, str]], prefix: list[int]) -> float | None:
    """Logit margin between the two best tokens after request + ``prefix`` (causal models only)."""
    text = getattr(decoder, "text", decoder)
    if getattr(decoder, "family", "") != "autoregressive":
        return None  # diffusion answers are not decoded left to right: no single next-token margin
    ids = torch.tensor([text.render(messages) + prefix], device=text.device)
    top = text.model(input_ids=ids).logits[0, -1].float().topk(2).values
    return float(top[0] - top[1])


def check_model(name: str, dtype: str, cfg: CheckConfig) -> ModelFigures:
    decoder = load_decoder(model_config(name, [f"dtype={dtype}"]), device=cfg.device,
                           max_new_tokens=cfg.max_new_tokens)
    figures = ModelFigures()
    for i, text in enumerate(REQUESTS[: cfg.requests]):
        request = StreamRequest(f"r{i}", (), tuple(segment(text)))
        outcome = run_pair(decoder, request, Greedy(), base_first=i % 2 == 0)
        figures.speedup_forwards.append(outcome.speedup_forwards)
        figures.speedup_wall.append(outcome.speedup_wall)
        base, stream = outcome.base.token_ids, outcome.stream.token_ids
        if base == stream:
            figures.same += 1
            continue
        j = first_difference(base, stream)
        margin = top2_margin(decoder, request.messages(), list(base[:j]))
        if margin is not None and margin < cfg.tie_margin:
            figures.near_tie_flips += 1
        else:
            figures.other_flips += 1
    return figures


@torch.inference_mode()
def verify_vs_decode(cfg: CheckConfig, dtype: str) -> tuple[float, float]:
    """Median wall of one verify forward over the draft vs the draft's tokens one by one (same cached request)."""
    decoder = load_decoder(model_config(cfg.verify_model, [f"dtype={dtype}"]), device=cfg.device,
                           max_new_tokens=cfg.verify_draft_tokens)
    assert isinstance(decoder, AutoregressiveDecoder)
    dec = AutoregressiveDecoder(decoder.model, decoder.tokenizer, max_new_tokens=cfg.verify_draft_tokens,
                                device=cfg.device, eos_token_ids=())
    messages = [{"role": "user", "content": REQUESTS[0]}]
    request, draft = dec.render(messages), list(dec.generate(messages).token_ids)
    rounds = [time_verify_vs_decode(dec, request, draft) for _ in range(cfg.verify_rounds + 1)]  # 1st warms up
    return statistics.median(r[0] for r in rounds[1:]), statistics.median(r[1] for r in rounds[1:])


def main(argv: list[str]) -> int:
    cfg = load(CheckConfig, overrides=argv)
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine, "
              "or pass device=cpu for a dry run of the code paths", file=sys.stderr)
        return 2
    where = torch.cuda.get_device_name(0) if cfg.device.startswith("cuda") else "cpu"
    print(f"gpu_check on {where}, torch {torch.__version__}, {cfg.requests} requests, budget {cfg.max_new_tokens}")
    print(f"{'model':<26} {'dtype':<9} {'stream==base':>12} {'near-tie':>8} {'other':>5} "
          f"{'med fwd x':>9} {'med wall x':>10} {'wall/fwd':>8} {'s':>6}")
    for name in cfg.models:
        for dtype in cfg.dtypes:
            start = time.perf_counter()
            f = check_model(name, dtype, cfg)
            fwd, wall = statistics.median(f.speedup_forwards), statistics.median(f.speedup_wall)
            print(f"{name:<26} {dtype:<9} {f.same:>5}/{len(f.speedup_forwards):<6} {f.near_tie_flips:>8} "
                  f"{f.other_flips:>5} {fwd:>9.2f} {wall:>10.2f} {wall / fwd:>8.2f} "
                  f"{time.perf_counter() - start:>6.1f}")
    if cfg.verify_model:
        for dtype in cfg.dtypes:
            v, d = verify_vs_decode(cfg, dtype)
            print(f"{cfg.verify_model} {dtype}: verify {cfg.verify_draft_tokens} tokens in one forward {v * 1e3:.2f} ms, "
                  f"one by one {d * 1e3:.2f} ms, ratio {v / d:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
