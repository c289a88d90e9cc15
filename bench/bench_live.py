"""Post-hoc vs live waits on a real model and the real clock (docs/timing.md).

    python bench/bench_live.py                                        # SmolLM2, 3 CoEdIT requests
    python bench/bench_live.py benchmark=mbpp limit=2 rates=[10,40] max_new_tokens=24

Per example: replay A (today's stream run, prefixes back to back), the live runs (one per rate ×
policy, sleeping until segments arrive on the real clock), then replay B. The post-hoc wait of each
policy is computed from replay A's steps (latest-only steps after a skip are costed by a cost model
fitted on both replays); the live wait is what the live run measured. Noise: the same post-hoc wait
computed from replay A and from replay B differs only by run-to-run timing noise; the live − post-hoc
difference is judged against it.
"""

from __future__ import annotations

import os
import statistics
import sys
from dataclasses import dataclass, field

import torch

from streamgen.acceptance_rules import Greedy
from streamgen.benchmarks import load_benchmark
from streamgen.config import benchmark_config, default_data_dir, load, model_config
from streamgen.decoding.base import StepResult
from streamgen.families.registry import load_decoder
from streamgen.live import LiveSettings, run_stream_live
from streamgen.stream import StreamRequest, run_stream
from streamgen.timing.costmodel import fit_cost_model
from streamgen.timing.policies import Policy, StepFacts, evaluate
from streamgen.timing.timeline import TypingModel, arrival_times


@dataclass(frozen=True)
class BenchConfig:
    model: str = "smollm2"
    benchmark: str = "coedit"
    limit: int = 3
    rates: list[float] = field(default_factory=lambda: [10.0, 40.0])
    policies: list[str] = field(default_factory=lambda: ["every", "latest"])
    max_new_tokens: int = 24
    threads: int = 1


def _facts(steps: tuple[StepResult, ...], arrivals: tuple[float, ...]) -> list[StepFacts]:
    return [StepFacts(t, s.answer.wall_s, s.answer.forwards, s.answer.meter.tokens_fed, s.draft_tokens_in,
                      s.accepted_tokens, s.generated_tokens) for t, s in zip(arrivals, steps, strict=True)]


def _requests(cfg: BenchConfig) -> list[StreamRequest]:
    bench = load_benchmark(benchmark_config(cfg.benchmark))
    out = []
    for ex in bench.examples(default_data_dir(), cfg.limit):
        segs = tuple(bench.segments(ex))
        if len(segs) > 1:
            out.append(StreamRequest(ex.example_id, tuple(ex.history), segs, ex.system_prompt))
    return out


def main(argv: list[str]) -> None:
    cfg = load(BenchConfig, overrides=argv)
    torch.set_num_threads(cfg.threads)
    dec = load_decoder(model_config(cfg.model), max_new_tokens=cfg.max_new_tokens)
    print(f"model {cfg.model}, {cfg.benchmark} × {cfg.limit}, max_new_tokens {cfg.max_new_tokens}, "
          f"load average at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    results = []
    for req in _requests(cfg):
        run_stream(dec, req, Greedy())  # warm-up: caches, allocator
        replay_a = run_stream(dec, req, Greedy())
        live = {(r, p): run_stream_live(dec, req, Greedy(), LiveSettings(Policy(p), TypingModel(r)))
                for r in cfg.rates for p in cfg.policies}
        replay_b = run_stream(dec, req, Greedy())
        results.append((req, replay_a, replay_b, live))
    every = [s for _, a, b, _ in results for s in (*a, *b)]
    cost = fit_cost_model([s.answer.forwards for s in every], [s.answer.meter.tokens_fed for s in every],
                          [s.answer.wall_s for s in every])
    print(f"cost model: {cost.a_s * 1e3:.2f} ms/forward + {cost.b_s * 1e3:.3f} ms/token (R² {cost.r2:.3f})")
    print("\n| example | segs | rate | policy | post-hoc A (s) | post-hoc B (s) | live (s) | live − A | B − A "
          "| steps run live / post | modelled |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    live_diffs, replay_diffs = [], []
    for req, a, b, live in results:
        for (rate, policy), run in live.items():
            times = arrival_times(req.segments, TypingModel(rate))
            post_a = evaluate(_facts(a, times), Policy(policy), cost)
            post_b = evaluate(_facts(b, times), Policy(policy), cost)
            t = run.timing[-1]
            live_wait = t.start_s + run.steps[-1].answer.wall_s - t.arrival_s
            live_diffs.append(abs(live_wait - post_a.wait_s))
            replay_diffs.append(abs(post_b.wait_s - post_a.wait_s))
            print(f"| {req.example_id} | {len(req.segments)} | {rate:g} | {policy} | {post_a.wait_s:.3f} | "
                  f"{post_b.wait_s:.3f} | {live_wait:.3f} | {live_wait - post_a.wait_s:+.3f} | "
                  f"{post_b.wait_s - post_a.wait_s:+.3f} | {[x.step for x in run.timing]} / "
                  f"{[r.step for r in post_a.ran]} | {'yes' if post_a.modelled else 'no'} |")
    print(f"\nmedian |live − post-hoc A| = {statistics.median(live_diffs):.3f} s, max {max(live_diffs):.3f} s; "
          f"median |B − A| (replay noise) = {statistics.median(replay_diffs):.3f} s, max {max(replay_diffs):.3f} s")
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
