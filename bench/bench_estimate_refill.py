"""The study grid's LLaDA / Dream GPU-hours under the stream refill before and after issue 39, by what is kept.

    python bench/bench_estimate_refill.py                       # cluster=slurm_a100 grid=full
    python bench/bench_estimate_refill.py cluster=slurm_a6000

Plans ``grid`` (its pre-flight problems, e.g. checkpoints not cached here, are ignored: the estimate
needs only the configs), keeps its bidirectional models' units (LLaDA-8B, Dream-7B) and estimates them
(``jobs.grid.gpu_hours.estimate_plan``) twice:

- **before**: the earlier refill, now the named options ``full_block_refill: true`` and
  ``refill_after_eos: true`` (a block with any masked position runs all its steps; a kept draft's tail
  after its EOS is masked and decoded again);
- **after**: today's defaults (a draft kept whole costs the floor, verify + one step; a block with m of
  its B positions masked runs ceil(m · steps_per_block / B) steps);

each under four assumptions about what every later stream step keeps of its draft (the estimate cannot
know it; the dry run prints the first, an upper bound): nothing; the leading half; all of it; and the
study's §6.5 reading, the visible verifier keeping its draft whole and the hidden one nothing.
Printed: GPU-hours per model and in total, and after / before.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.grid.gpu_hours import estimate_plan, grid_device, workers_on  # noqa: E402
from jobs.grid.plan import GridPlan, plan_with_problems  # noqa: E402
from streamgen.config import cluster_config, grid_config, load  # noqa: E402

EARLIER = {"full_block_refill": True, "refill_after_eos": True}
SCENARIOS: list[tuple[str, Callable[[Any], float]]] = [
    ("nothing kept (the dry run's bound)", lambda cell: 0.0),
    ("half of each draft kept", lambda cell: 0.5),
    ("every draft kept whole", lambda cell: 1.0),
    ("§6.5: visible keeps whole, hidden nothing", lambda cell: 1.0 if cell.verifier_mode == "visible" else 0.0),
]


@dataclass(frozen=True)
class BenchConfig:
    grid: str = "full"
    cluster: str = "slurm_a100"


def bidirectional_part(plan: GridPlan, earlier: bool) -> GridPlan:
    """``plan`` cut to its bidirectional models' shards, their decoding switched to the earlier refill
    when ``earlier``."""
    shards = []
    for shard in plan.shards:
        model = shard.cell.model
        if model.family != "bidirectional":
            continue
        if earlier:
            model = dataclasses.replace(model, decoding={**model.decoding, **EARLIER})
            shard = dataclasses.replace(shard, cell=dataclasses.replace(shard.cell, model=model))
        shards.append(shard)
    models = {n: m for n, m in plan.models.items() if m.family == "bidirectional"}
    return dataclasses.replace(plan, shards=tuple(shards), models=models)


def main(argv: list[str]) -> int:
    cfg = load(BenchConfig, overrides=argv)
    grid = grid_config(cfg.grid, [f"cluster={cfg.cluster}"])
    cluster = cluster_config(cfg.cluster)
    t0 = time.perf_counter()
    plan, _problems = plan_with_problems(grid, cluster)
    if plan is None:
        print(f"grid {cfg.grid!r} cannot be planned: {_problems}", file=sys.stderr)
        return 1
    device, workers = grid_device(grid, cluster), workers_on(grid, cluster)
    parts = {when: bidirectional_part(plan, when == "before") for when in ("before", "after")}
    names = sorted(parts["after"].models)
    print(f"grid={cfg.grid} cluster={cfg.cluster}: {device.name} GPU-hours of the bidirectional models' units")
    print(f"{'what each later stream step keeps':44} {'refill':7} " + " ".join(f"{n:>10}" for n in names)
          + f" {'total':>10} {'after/before':>13}")
    for label, kept in SCENARIOS:
        totals = {}
        for when, part in parts.items():
            est = estimate_plan(part, device, workers=workers, kept=kept)
            per = {n: sum(x.gpu_hours for x in est.lines if x.model == n) for n in names}
            totals[when] = est.gpu_hours
            ratio = f"{totals['after'] / totals['before']:13.3f}" if when == "after" and totals["before"] else ""
            print(f"{label if when == 'before' else '':44} {when:7} " + " ".join(f"{per[n]:10,.1f}" for n in names)
                  + f" {est.gpu_hours:10,.1f} {ratio}")
    print(f"({time.perf_counter() - t0:.0f} s; assumptions as the dry run prints them, docs/estimate.md)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
