"""LLaDA / Dream stream steps before and after issue 39: residual forwards per example, side by side.

    python bench/bench_bidir_refill.py           # scripted LLaDA/Dream (also at 1 token per step), tiny LLaDA/Dream
    python bench/bench_bidir_refill.py @64x1     # only the rows whose name holds one of these substrings

For each model and acceptance rule, the same examples run twice in one process: with the earlier
refill (``full_block_refill: true`` + ``refill_after_eos: true``) and with the defaults (the official
rate per masked position; the tail after a kept EOS not decoded again). Printed: base forwards,
residual forwards (mean over examples) both ways, and whether the answers agree. Forward counts only:
no timing, so the machine's load does not matter. The "@64x1" rows run the scripted models at the
study's rate of one token per step (64 positions, one block, 64 steps).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamgen.acceptance_rules import make_rule  # noqa: E402
from streamgen.config import benchmark_config, model_config  # noqa: E402
from streamgen.families.registry import load_decoder  # noqa: E402
from streamgen.stream import StreamRequest, run_pair  # noqa: E402

BEFORE = ["decoding.full_block_refill=true", "decoding.refill_after_eos=true"]
ONE_PER_STEP = ["decoding.gen_length=64", "decoding.block_length=64", "decoding.steps=64"]
MODELS = [(m, []) for m in ("scripted-llada-constant", "scripted-llada-prefix", "scripted-llada-calibrated",
                            "scripted-dream-constant", "scripted-dream-prefix", "scripted-dream-calibrated",
                            "tiny-llada", "tiny-dream")]
MODELS += [(f"{m}@64x1", ONE_PER_STEP) for m in ("scripted-llada-constant", "scripted-llada-prefix",
                                                   "scripted-dream-constant", "scripted-dream-prefix")]
RULES = [("greedy", None), ("threshold", 0.5)]


def requests(limit: int = 3) -> list[StreamRequest]:
    from streamgen.benchmarks import load_benchmark

    bench = load_benchmark(benchmark_config("coedit"))
    return [StreamRequest(ex.example_id, tuple(ex.history), tuple(bench.segments(ex)), ex.system_prompt)
            for ex in bench.examples(limit=limit)]


def measure(make, reqs: list[StreamRequest], rule) -> tuple[float, float, list[tuple[int, ...]]]:
    decoder = make()
    outs = [run_pair(decoder, r, rule, base_first=True) for r in reqs]
    return (statistics.mean(o.base.forwards for o in outs), statistics.mean(o.residual_forwards for o in outs),
            [o.stream.token_ids for o in outs])


def main(argv: list[str]) -> int:
    """``argv``: substrings of the model rows to run (all when empty), e.g. ``@64x1``."""
    reqs = requests()
    print(f"{'model':32} {'rule':9} {'base':>6} {'resid before':>13} {'resid after':>12} {'answers':>8}")
    for name, extra in MODELS:
        if argv and not any(a in name for a in argv):
            continue
        model = name.split("@")[0]

        def build(options: list[str], model: str = model, extra: list[str] = extra):
            return load_decoder(model_config(model, [*extra, *options]), max_new_tokens=16)

        for acceptance, tau in RULES:
            rule = make_rule(acceptance, {"tau": tau})
            base, before, a = measure(lambda: build(BEFORE), reqs, rule)
            _, after, b = measure(lambda: build([]), reqs, rule)
            label = "greedy" if tau is None else f"τ={tau:g}"
            print(f"{name:32} {label:9} {base:6.1f} {before:13.2f} {after:12.2f} {'same' if a == b else 'DIFFER':>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
