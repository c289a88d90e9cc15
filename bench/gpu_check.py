"""The prepared check for a lent GPU (one CUDA device, < 5 minutes): prints figures, changes nothing.

    python bench/gpu_check.py                          # on a CUDA machine: everything below
    python bench/gpu_check.py device=cpu models=[smollm2] requests=6 max_new_tokens=96   # the same code on CPU
    python bench/gpu_check.py device=cpu models=[scripted-ar-neartie] requests=4 verify_model=  # dry run, no part 3

1. For SmolLM2 and the tiny models (every family), in float32 and bfloat16, greedy (and greedy with each
   of ``tie_guards``, dtype spacings): base and stream runs of a few multi-sentence requests, and the
   divergence table of the report (``analysis/sql/divergence.sql`` over the pair rows ``jobs.run.rows``
   builds, unscored): stream == base rate, the base run's top-2 margin at the first difference in
   spacings of the dtype at that logit, the share of differences at a near tie (``near_tie_spacings``
   or less) and the share that followed the draft branch. Diffusion families report no margins (–).
2. Per model and dtype: median speedup in forwards and in wall clock, and their ratio, over the timed
   pairs only: each (model, dtype) first runs one untimed warm-up pair (``streamgen.warmup``; printed as
   "warm-up: 1 pair, X s, not counted"), which absorbs CUDA context creation and kernel selection
   (``warm_up=false`` skips it, to see what it removes).
3. ``verify_model`` (an autoregressive model; ``verify_model=`` skips it): one verify forward over a
   64-token draft vs 64 single-token forwards on the same cached request (the paper's premise that
   verifying costs far less than decoding).

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

from analysis.tables import table_over_pairs  # noqa: E402
from jobs.run.rows import RowContext, outcome_rows  # noqa: E402
from streamgen.acceptance_rules import Greedy  # noqa: E402
from streamgen.config import BenchmarkConfig, ModelConfig, load, model_config  # noqa: E402
from streamgen.decoding.numerics import numerics_record  # noqa: E402
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder  # noqa: E402
from streamgen.families.registry import load_decoder  # noqa: E402
from streamgen.requests.segment import segment  # noqa: E402
from streamgen.results.cells import Cell  # noqa: E402
from streamgen.results.records import PairRecord, to_table  # noqa: E402
from streamgen.stream import StreamRequest, run_pair  # noqa: E402
from streamgen.warmup import WarmUp, warm_up  # noqa: E402

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
BENCHMARK = BenchmarkConfig(name="gpu_check", version="1")  # the requests above: no reference, no score


@dataclass(frozen=True)
class CheckConfig:
    device: str = "cuda"
    models: list[str] = field(default_factory=lambda: [
        "smollm2", "tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-refusion", "tiny-llada", "tiny-dream",
        "scripted-ar-prefix", "scripted-refusion-prefix", "scripted-llada-prefix"])
    dtypes: list[str] = field(default_factory=lambda: ["float32", "bfloat16"])
    requests: int = 6
    max_new_tokens: int = 64
    tie_guards: list[float] = field(default_factory=list)  # greedy with tie_guard=g too (autoregressive only)
    near_tie_spacings: float = 1.0  # a first difference at a base margin of at most this many spacings
    verify_model: str | None = "smollm2"  # an autoregressive model; empty (verify_model=): skip part 3
    verify_draft_tokens: int = 64
    verify_rounds: int = 5
    warm_up: bool = True  # one untimed pair per (model, dtype) before the timed ones


@dataclass
class ModelRun:
    rows: list[PairRecord] = field(default_factory=list)
    speedup_forwards: list[float] = field(default_factory=list)  # the timed pairs only
    speedup_wall: list[float] = field(default_factory=list)
    warmup: WarmUp | None = None  # the untimed pair run first (None: warm_up=false)


def _requests(cfg: CheckConfig) -> list[StreamRequest]:
    return [StreamRequest(f"r{i}", (), tuple(segment(t))) for i, t in enumerate(REQUESTS[: cfg.requests])]


def check_model(name: str, dtype: str, cfg: CheckConfig) -> ModelRun:
    """Every request's pair under greedy and each tie guard, as pair rows (unscored)."""
    mcfg: ModelConfig = model_config(name, [f"dtype={dtype}"])
    decoder = load_decoder(mcfg, device=cfg.device, max_new_tokens=cfg.max_new_tokens)
    guards = [None, *cfg.tie_guards] if mcfg.family == "autoregressive" else [None]
    model = getattr(decoder, "model", None)
    numerics = numerics_record(model, cfg.device).to_json() if isinstance(model, torch.nn.Module) else None
    run = ModelRun(warmup=warm_up(decoder) if cfg.warm_up else None)
    for guard in guards:
        ctx = RowContext(Cell(mcfg, BENCHMARK, Greedy(tie_guard=guard), None, cfg.max_new_tokens),
                         "gpu_check", "-", "-", cfg.device, numerics=numerics)
        for i, request in enumerate(_requests(cfg)):
            outcome = run_pair(decoder, request, Greedy(tie_guard=guard), base_first=i % 2 == 0)
            run.rows.append(outcome_rows(outcome, ctx).pair)
            if guard is None:
                run.speedup_forwards.append(outcome.speedup_forwards)
                run.speedup_wall.append(outcome.speedup_wall)
    return run


def _num(value: object, spec: str = ".1f") -> str:
    return "–" if value is None else format(value, spec)


def divergence_lines(rows: list[PairRecord], near_tie: float) -> list[str]:
    """The divergence table's figures per (model, dtype, tie guard), one line each."""
    out = []
    for r in table_over_pairs(to_table(rows, PairRecord), "divergence").to_pylist():
        diverged = [p for p in rows if p.model == r["model"] and p.tie_guard == r["tie_guard"]
                    and p.first_diff_token is not None]
        ties = sum(p.base_margin_at_diff is not None and p.base_margin_at_diff <= near_tie for p in diverged)
        guard = "greedy" if r["tie_guard"] is None else f"guard={r['tie_guard']:g}"
        out.append(f"{r['model']:<26} {r['dtype']:<9} {guard:<10} {r['equal']:>5}/{r['n']:<6} "
                   f"{ties:>8} {len(diverged) - ties:>5} {_num(r['margin_p50']):>9} "
                   f"{_num(r['draft_branch_share'], '.0%'):>7} {_num(r['accepted_mean']):>8}")
    return out


@torch.inference_mode()
def verify_vs_decode(cfg: CheckConfig, dtype: str) -> tuple[float, float]:
    """Median wall of one verify forward over the draft vs the draft's tokens one by one (same cached request)."""
    assert cfg.verify_model
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
    print(f"gpu_check on {where}, torch {torch.__version__}, {cfg.requests} requests, budget {cfg.max_new_tokens}; "
          f"margins in dtype spacings at the top-1 logit, near tie <= {cfg.near_tie_spacings:g}")
    print(f"{'model':<26} {'dtype':<9} {'rule':<10} {'stream==base':>12} {'near-tie':>8} {'other':>5} "
          f"{'margin p50':>9} {'draft br':>7} {'accepted':>8}")
    speed = []
    for name in cfg.models:
        for dtype in cfg.dtypes:
            start = time.perf_counter()
            run = check_model(name, dtype, cfg)
            for line in divergence_lines(run.rows, cfg.near_tie_spacings):
                print(line)
            fwd, wall = statistics.median(run.speedup_forwards), statistics.median(run.speedup_wall)
            warm = run.warmup.describe() if run.warmup else "no warm-up"
            speed.append(f"{name:<26} {dtype:<9} {fwd:>9.2f} {wall:>10.2f} {wall / fwd:>8.2f} "
                         f"{len(run.speedup_wall):>5} {time.perf_counter() - start:>6.1f}  {warm}")
    print(f"\n{'model':<26} {'dtype':<9} {'med fwd x':>9} {'med wall x':>10} {'wall/fwd':>8} {'pairs':>5} {'s':>6}")
    print("\n".join(speed))
    if cfg.verify_model:
        for dtype in cfg.dtypes:
            v, d = verify_vs_decode(cfg, dtype)
            print(f"{cfg.verify_model} {dtype}: verify {cfg.verify_draft_tokens} tokens in one forward {v * 1e3:.2f} ms, "
                  f"one by one {d * 1e3:.2f} ms, ratio {v / d:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
