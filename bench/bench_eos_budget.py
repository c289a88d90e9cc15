"""How many base answers end with EOS rather than the answer budget, at several budgets.

    python bench/bench_eos_budget.py                          # grid=local's requests, limit=4, budgets 64..384
    python bench/bench_eos_budget.py limit=6 budgets=[128,192,256] 'overrides=["benchmarks=[chat,coedit]"]'

Greedy decoding is prefix-consistent: the answer under budget B is the first B tokens of the answer
under a larger budget. So each base answer is decoded ONCE at the largest budget, and an answer ends
with EOS under budget B exactly when its length (EOS included) is at most B. The requests are the
grid's own (``jobs.grid.plan.plan_grid``: same examples, system prompts, exclusions). Prints per benchmark
and overall the share of answers ending in EOS per budget, and the tokens the base runs decode (the
grid's base forwards: a proxy for its run time).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from jobs.grid.plan import plan_grid  # noqa: E402
from streamgen.config import grid_config, load  # noqa: E402
from streamgen.families.registry import load_decoder  # noqa: E402

log = logging.getLogger("bench_eos_budget")


@dataclass(frozen=True)
class BenchConfig:
    grid: str = "local"
    limit: int = 4
    budgets: list[int] = field(default_factory=lambda: [64, 128, 192, 256, 384])
    threads: int = 1
    overrides: list[str] = field(default_factory=list)  # of the grid, e.g. ['benchmarks=[chat,coedit]']


def grid_requests(name: str, overrides: list[str]) -> dict[str, list]:
    """benchmark → the grid's requests (excluded examples left out)."""
    plan = plan_grid(grid_config(name, overrides))
    out: dict[str, dict] = {}
    for shard in plan.shards:
        for ex in plan.task(shard, "bench", "bench").examples:
            if ex.request is not None:
                out.setdefault(shard.cell.benchmark.name, {})[ex.example_id] = ex.request
    return {b: list(reqs.values()) for b, reqs in out.items()}


def eos_share(lengths: list[tuple[int, bool]], budget: int) -> float:
    """Share of answers that end in EOS under ``budget`` (length with EOS ≤ budget)."""
    return sum(done and n <= budget for n, done in lengths) / len(lengths)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING)
    log.setLevel(logging.INFO)
    cfg = load(BenchConfig, overrides=argv)
    torch.set_num_threads(cfg.threads)
    requests = grid_requests(cfg.grid, [f"limit={cfg.limit}", *cfg.overrides])
    model = grid_config(cfg.grid).models[0]
    from streamgen.config import model_config

    dec = load_decoder(model_config(model), max_new_tokens=max(cfg.budgets))
    print(f"model {model}, grid {cfg.grid} limit={cfg.limit}, largest budget {max(cfg.budgets)}, "
          f"load average at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    lengths: dict[str, list[tuple[int, bool]]] = {}
    start = time.perf_counter()
    for bench, reqs in requests.items():
        for req in reqs:
            gen = dec.generate(req.messages())
            lengths.setdefault(bench, []).append((len(gen.token_ids), gen.finished))
            log.info("%s: %d tokens, %s", req.example_id, len(gen.token_ids), "EOS" if gen.finished else "budget")
        print(f"{bench}: lengths {[n if done else f'>{n}' for n, done in lengths[bench]]}", flush=True)
    everything = [x for v in lengths.values() for x in v]
    print(f"decoded {sum(n for n, _ in everything)} tokens in {time.perf_counter() - start:.0f} s")
    print("budget | " + " | ".join(lengths) + " | all | base tokens")
    for b in cfg.budgets:
        shares = " | ".join(f"{eos_share(v, b):.2f}" for v in lengths.values())
        tokens = sum(min(n, b) for n, _ in everything)
        print(f"{b} | {shares} | {eos_share(everything, b):.2f} | {tokens}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
