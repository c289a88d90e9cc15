"""Sandbox runs per example: every pair's two answers (before) vs each distinct answer once per unit (now).

    python bench/bench_score_once.py                                   # the smoke grid, its MBPP cells
    python bench/bench_score_once.py taus=[0.3,0.5,0.7,0.9]            # greedy + four τ, as the study
    python bench/bench_score_once.py models=[tiny-llada] verifier_modes=[visible,hidden]

Decodes the grid's code-benchmark shards in-process (one actor per model, shared work on, no Ray),
scores each work unit with ``jobs.run.rows.score_unit`` while counting the programs handed to the sandbox,
and prints, per model: examples, cells per example, sandbox runs before (both answers of every pair row
that yield a program — what scoring each pair on its own ran) and now, and runs per example. The rows
are unchanged (tests/jobs/run/test_score_once.py); this prints the count.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.grid.plan import plan_grid  # noqa: E402
from jobs.grid.units import group_shards  # noqa: E402
from jobs.run.actors import ModelActor  # noqa: E402
from jobs.run.rows import score_unit  # noqa: E402
from streamgen.benchmarks import load_benchmark  # noqa: E402
from streamgen.benchmarks.execution import Runner  # noqa: E402
from streamgen.config import grid_config  # noqa: E402


def main(argv: list[str]) -> int:
    overrides = [a for a in argv if "=" in a]
    with tempfile.TemporaryDirectory() as out:
        plan = plan_grid(grid_config("smoke", ["benchmarks=[mbpp]", *overrides, f"results_dir={out}"]))
    ran: Counter[str] = Counter()
    run_many = Runner.run_many
    current = [""]

    def counting(self: Runner, programs: list[str], **kw: object) -> object:
        ran[current[0]] += len(programs)
        return run_many(self, programs, **kw)  # type: ignore[arg-type]

    Runner.run_many = counting  # type: ignore[method-assign,assignment]
    print(f"{'model':<24} {'examples':>8} {'cells':>5} {'before':>7} {'now':>5} {'per example':>16}")
    for name, model in plan.models.items():
        current[0] = name
        actor, before, examples, cells = ModelActor(model), 0, set(), set()
        for unit in group_shards([s for s in plan.shards if s.model_name == name], share=True):
            tasks = tuple(plan.task(s, "bench", "bench") for s in unit)
            for task, rows in zip(tasks, score_unit(tasks, actor.run_unit(tasks)), strict=True):
                bench = load_benchmark(task.cell.benchmark)
                cells.add(task.cell.cell_id)
                for p in rows.pairs:
                    if p.base_quality is None:
                        continue
                    examples.add((p.benchmark, p.example_id))
                    ex = plan.examples[p.benchmark][p.example_id]
                    before += sum(bench.program_or_verdict(ex, a)[0] is not None for a in (p.base_answer, p.stream_answer))
        n = max(len(examples), 1)
        print(f"{name:<24} {len(examples):>8} {len(cells):>5} {before:>7} {ran[name]:>5} "
              f"{before / n:>7.1f} → {ran[name] / n:<6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
