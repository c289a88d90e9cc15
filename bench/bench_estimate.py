"""The estimate against measured time on this machine: predicted / measured decode seconds, per grid, side by side.

    python bench/bench_estimate.py                       # grid=smoke and the default grid (grid=local), fresh results
    python bench/bench_estimate.py grids=[smoke]
    python bench/bench_estimate.py "grids=[smoke,local]" results=DIR pilot=1   # keep the runs; pilot examples per unit kind
    STREAMGEN_DEVICE_FILE=results/machine.json python bench/bench_estimate.py   # this machine's figures, just measured

For each grid: the models are calibrated here (``streamgen.sizing.calibration``, as ``--calibrate`` does:
measured seconds per forward, fitted a + b·T; right before the run, so both see the same load), the plan is
estimated on the ``cpu`` device three times — roofline, calibrated (``jobs.grid.gpu_hours``; the results directory
is fresh, so answer lengths are the assumed half budget) and calibrated with the pilot (``jobs.run.pilot``: its
answer lengths and forward factors, as ``--calibrate`` prints it) — then the grid runs here
(``jobs.cluster.executors.run_grid_on_cluster``, as ``workflows/full_grid.py`` does) and both estimates are computed
again with the run's own answer lengths (``rows``). Printed: predicted and measured decode seconds (the
actors' time inside units, summed over actors; the estimate's GPU-hours × 3600), seconds inside forwards,
the ratios, and the load average at calibration and after the run; last, one line per grid:
``grid X: calibrated/measured = R (pilot), R1 (pilot's counts, the fit's seconds), R2 (assumed lengths),
roofline/measured = R3`` (R: the pilot's lengths, forward factors and time factors, as ``--calibrate`` prints
it). Model loading, Ray start and scoring are outside both sides; the pilot's own decoding (before the run) is outside the measured side.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.cluster.dry_run import answer_lengths, run_company, run_cores  # noqa: E402
from jobs.grid.gpu_hours import estimate_plan, grid_device, workers_on  # noqa: E402
from jobs.grid.plan import plan_grid  # noqa: E402
from jobs.run.pilot import pilot_path, run_pilots  # noqa: E402
from streamgen.config import GridConfig, cluster_config, grid_config, load  # noqa: E402
from streamgen.sizing.calibration import Fit, calibrate_models, load_cache  # noqa: E402


@dataclass(frozen=True)
class BenchConfig:
    grids: list[str] | None = None  # None: smoke and local (the README's default command)
    overrides: list[str] | None = None  # key=value for every grid, e.g. [limit=2]
    results: str | None = None  # keep the runs and calibration files here (default: a temporary folder)
    pilot: int = 1  # examples the pilot decodes per (model, benchmark) and unit kind


def predicted_s(grid: GridConfig, rows_from: Path | None, calibration: Mapping[str, Fit] | None = None,
                answers: Mapping[tuple[str, str], float] | None = None,
                factors: Mapping[tuple[str, str], float] | None = None,
                time_factors: Mapping[str, float] | None = None, company_s: float = 0.0) -> float:
    cluster = cluster_config(grid.cluster)
    lengths = answer_lengths(rows_from) if rows_from is not None else dict(answers or {})
    est = estimate_plan(plan_grid(grid), grid_device(grid, cluster), workers=workers_on(grid, cluster),
                        answer_lengths=lengths, calibration=calibration, factors=factors, time_factors=time_factors,
                        company_s=company_s, cores=run_cores(cluster), company_processes=grid.score_workers)
    return est.gpu_hours * 3600


@dataclass(frozen=True)
class Measured:
    roofline: float
    roofline_rows: float
    calibrated: float
    calibrated_rows: float
    calibrated_pilot: float  # the pilot's lengths, forward factors and time factors, and the company on a CPU
    calibrated_pilot_alone: float  # the same without the company (the decoders alone on the cores)
    calibrated_pilot_counts: float  # the pilot's lengths and forward factors only (the fit's seconds as measured)
    pilot_s: float
    decode_s: float
    forward_s: float
    wall_s: float
    load_calibration: float
    load_after: float


def measure(name: str, root: Path, overrides: list[str], pilot: int = 1) -> Measured:
    """Calibrate, fly the pilot, estimate (roofline, calibrated, calibrated with the pilot), run, estimate again
    with the run's answer lengths."""
    from jobs.cluster.executors import run_grid_on_cluster

    grid = grid_config(name, [f"results_dir={root / name}", *overrides])
    cal = calibrate_models(plan_grid(grid).models, root / f"{name}-calibration.json",
                           concurrent=workers_on(grid, cluster_config(grid.cluster)))
    for line in cal.notes:
        print(line, flush=True)
    load_cal = os.getloadavg()[0]
    t0 = time.perf_counter()
    workers = workers_on(grid, cluster_config(grid.cluster))
    flown = run_pilots(plan_grid(grid), pilot_path(root / f"{name}-calibration.json"), pilot=pilot, processes=workers,
                       fits=cal.fits)
    pilot_s = time.perf_counter() - t0
    for line in flown.notes:
        print(line, flush=True)
    for f in flown.facts.values():
        print(f"pilot {f.model} on {f.benchmark}: {f.examples} example(s), answer {f.answer_tokens:.1f} tokens, "
              f"factor {f.executed}/{f.rule} = {f.factor:.2f}", flush=True)
    roof, calibrated = predicted_s(grid, None), predicted_s(grid, None, cal.fits)
    for model, factor in flown.time_factors.items():
        print(f"pilot {model}: time factor {factor:.2f}", flush=True)
    counts = predicted_s(grid, None, cal.fits, flown.answer_lengths, flown.factors)
    alone = predicted_s(grid, None, cal.fits, flown.answer_lengths, flown.factors, flown.time_factors)
    company = run_company(flown, plan_grid(grid), grid, cluster_config(grid.cluster))
    with_pilot = predicted_s(grid, None, cal.fits, flown.answer_lengths, flown.factors, flown.time_factors, company)
    print(f"pilot: the run's scoring {company:.1f} CPU-s beside {alone:.1f} s of decoding on "
          f"{run_cores(cluster_config(grid.cluster))} core(s): decodes × {with_pilot / alone if alone else 1:.2f}", flush=True)
    print(f"{name}: predicted {roof:.1f} s (roofline), {calibrated:.1f} s (calibrated), {with_pilot:.1f} s (calibrated, "
          f"pilot of {pilot_s:.0f} s); running it (load {load_cal:.2f})", flush=True)
    summary = run_grid_on_cluster(grid)
    t = summary.timings  # type: ignore[attr-defined]
    print(f"{name}: the run decoded in {t.decode_s:.1f} s of wall, {t.decode_cpu_s:.1f} s of its actors' CPU "
          f"(wall / CPU {t.decode_s / t.decode_cpu_s if t.decode_cpu_s else float('nan'):.2f}); predicted "
          f"{alone:.1f} s alone, {with_pilot:.1f} s with the company", flush=True)
    return Measured(roof, predicted_s(grid, root / name), calibrated, predicted_s(grid, root / name, cal.fits),
                    with_pilot, alone, counts, pilot_s, t.decode_s, t.forward_s, summary.wall_s, load_cal, os.getloadavg()[0])  # type: ignore[attr-defined]


def per_forward_check(results_dir: Path, fits: Mapping[str, Fit]) -> dict[str, tuple[float, float]]:
    """The calibration alone, without the forward-count model: per model, Σ over the run's own decodes (each
    pair's base run and every step row: forwards, tokens fed) of the fit's seconds, against Σ of their
    measured wall. An autoregressive decode is one forward of (tokens fed − further forwards) tokens and
    one-token forwards after it; another family's forwards are taken at their mean width. Shared work sits
    in several rows on both sides alike."""
    import duckdb

    con = duckdb.connect()
    pairs = f"read_parquet('{results_dir}/pairs/**/*.parquet', hive_partitioning=false)"
    steps = f"read_parquet('{results_dir}/steps/**/*.parquet', hive_partitioning=false)"
    family = dict(con.sql(f"select distinct model, family from {pairs}").fetchall())
    rows = con.sql(f"select model, base_forwards, base_tokens_fed, base_wall_s from {pairs} where base_forwards > 0 "
                   f"union all select model, forwards, tokens_fed, wall_s from {steps} where forwards > 0").fetchall()
    out: dict[str, tuple[float, float]] = {}
    for model, forwards, fed, wall in rows:
        fit = fits.get(model)
        if fit is None:
            continue
        if family.get(model) == "autoregressive":
            predicted = fit.seconds(max(1, fed - (forwards - 1))) + (forwards - 1) * fit.seconds(1)
        else:
            predicted = forwards * fit.seconds(max(1, round(fed / forwards)))
        p, m = out.get(model, (0.0, 0.0))
        out[model] = (p + predicted, m + wall)
    return out


def main(argv: list[str]) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING)
    cfg = load(BenchConfig, overrides=argv)
    names = cfg.grids or ["smoke", "local"]
    with tempfile.TemporaryDirectory(prefix="bench_estimate_") as tmp:
        root = Path(cfg.results or tmp)
        results = {n: measure(n, root, list(cfg.overrides or []), cfg.pilot) for n in names}
        checks = {n: per_forward_check(root / n, fits_of(root / f"{n}-calibration.json")) for n in names}
    print(f"{'grid':<6} {'roofline s':>10} {'(rows)':>8} {'calibr. s':>10} {'(rows)':>8} {'decode s':>9} {'fwd s':>8} "
          f"{'roof/dec':>8} {'(rows)':>7} {'cal/dec':>8} {'(rows)':>7} {'load cal':>8} {'load end':>8}")
    for n, m in results.items():
        d = m.decode_s
        print(f"{n:<6} {m.roofline:>10.1f} {m.roofline_rows:>8.1f} {m.calibrated:>10.1f} {m.calibrated_rows:>8.1f} "
              f"{d:>9.1f} {m.forward_s:>8.1f} {m.roofline / d:>8.2f} {m.roofline_rows / d:>7.2f} "
              f"{m.calibrated / d:>8.2f} {m.calibrated_rows / d:>7.2f} {m.load_calibration:>8.2f} {m.load_after:>8.2f}")
    print("\nthe calibration alone, on the run's own decodes (forwards and tokens fed as recorded; rows' wall):")
    for n, per in checks.items():
        for model, (p, actual) in per.items():
            print(f"{n:<6} {model:<22} predicted {p:>9.1f} s  measured {actual:>9.1f} s  ratio {p / actual:>5.2f}")
    print()
    for n, m in results.items():
        print(ratio_line(n, m))
    return 0


def ratio_line(name: str, m: Measured) -> str:
    """The grid's one line: calibrated/measured with the pilot and with the assumed lengths, roofline/measured,
    the pilot's seconds and the load average at calibration and after the run."""
    d = m.decode_s
    return (f"grid {name}: calibrated/measured = {m.calibrated_pilot / d:.2f} (pilot), {m.calibrated_pilot_alone / d:.2f} "
            f"(pilot, no company), {m.calibrated_pilot_counts / d:.2f} (pilot's counts, the fit's seconds), {m.calibrated / d:.2f} (assumed lengths), roofline/measured = {m.roofline / d:.2f}  [measured decode {d:.1f} s; pilot {m.pilot_s:.0f} s; "
            f"load {m.load_calibration:.2f} at calibration, {m.load_after:.2f} after]")


def fits_of(path: Path) -> dict[str, Fit]:
    """model name → fit, from a calibration file (every entry: one machine's file)."""
    return {e["model"]: Fit.from_dict(e["fit"]) for e in load_cache(path).values()}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
