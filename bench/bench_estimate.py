"""The estimate against measured time on this machine: predicted / measured decode seconds, per grid, side by side.

    python bench/bench_estimate.py                       # grid=smoke and the default grid (grid=local), fresh results
    python bench/bench_estimate.py grids=smoke
    STREAMGEN_DEVICE_FILE=results/machine.json python bench/bench_estimate.py   # this machine's figures, just measured

For each grid: the plan's estimate on the ``cpu`` device (``jobs.estimate``; first principles only: the
results directory is fresh, so answer lengths are the assumed half budget), then the grid runs here
(``jobs.executors.run_grid_on_cluster``, as ``workflows/full_grid.py`` does) and the estimate is computed
again with the run's own answer lengths (``rows``). Printed: predicted and measured decode seconds (the
actors' time inside units, summed over actors; the estimate's GPU-hours × 3600), seconds inside forwards,
and the ratios. Model loading, Ray start and scoring are outside both sides.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.dry_run import answer_lengths  # noqa: E402
from jobs.estimate import estimate_plan, grid_device, workers_on  # noqa: E402
from jobs.plan import plan_grid  # noqa: E402
from streamgen.config import GridConfig, cluster_config, grid_config, load  # noqa: E402


@dataclass(frozen=True)
class BenchConfig:
    grids: list[str] | None = None  # None: smoke and local (the README's default command)


def predicted_s(grid: GridConfig, rows_from: Path | None) -> float:
    cluster = cluster_config(grid.cluster)
    answers = answer_lengths(rows_from) if rows_from is not None else {}
    est = estimate_plan(plan_grid(grid), grid_device(grid, cluster), workers=workers_on(grid, cluster),
                        answer_lengths=answers)
    return est.gpu_hours * 3600


def measure(name: str, root: Path) -> tuple[float, float, float, float, float]:
    """(predicted, predicted with the run's answer lengths, measured decode s, measured forward s, wall s)."""
    from jobs.executors import run_grid_on_cluster

    grid = grid_config(name, [f"results_dir={root / name}"])
    before = predicted_s(grid, None)
    summary = run_grid_on_cluster(grid)
    t = summary.timings  # type: ignore[attr-defined]
    return before, predicted_s(grid, root / name), t.decode_s, t.forward_s, summary.wall_s  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING)
    cfg = load(BenchConfig, overrides=argv)
    names = cfg.grids or ["smoke", "local"]
    with tempfile.TemporaryDirectory(prefix="bench_estimate_") as tmp:
        results = {n: measure(n, Path(tmp)) for n in names}
    print(f"{'grid':<8} {'predicted s':>12} {'pred. (rows)':>12} {'decode s':>10} {'forward s':>10} {'wall s':>8} "
          f"{'pred/decode':>12} {'pred(rows)/decode':>18}")
    for n, (p, pr, dec, fwd, wall) in results.items():
        print(f"{n:<8} {p:>12.1f} {pr:>12.1f} {dec:>10.1f} {fwd:>10.1f} {wall:>8.1f} {p / dec:>12.2f} {pr / dec:>18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
