"""bench/bench_estimate.py's one line per grid, the one a rerun on a quiet machine is read by."""

from __future__ import annotations

from bench.bench_estimate import Measured, ratio_line


def test_the_grid_line_gives_each_ratio_against_the_measured_decode() -> None:
    m = Measured(roofline=30.0, roofline_rows=40.0, calibrated=60.0, calibrated_rows=90.0, calibrated_pilot=110.0,
                 calibrated_pilot_alone=85.0, calibrated_pilot_counts=70.0,
                 pilot_s=12.3, decode_s=100.0, forward_s=80.0, wall_s=200.0, load_calibration=2.5, load_after=6.25)
    assert ratio_line("smoke", m) == (
        "grid smoke: calibrated/measured = 1.10 (pilot), 0.85 (pilot, no company), 0.70 (pilot's counts, the fit's seconds), "
        "0.60 (assumed lengths)"
        ", roofline/measured = 0.30  "
        "[measured decode 100.0 s; pilot 12 s; load 2.50 at calibration, 6.25 after]")
