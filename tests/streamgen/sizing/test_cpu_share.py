"""The run's company on a CPU (streamgen/sizing/cpu_share.py): decoders and the scorers' work sharing the cores.

Expected values are the fluid model's cases read off by hand, and, on generated inputs, a deliberately simple
reference: bisection on the defining equation W = d · max(1, (n + min(k, O·n/W)) / m), m = max(n, cores).
"""

from __future__ import annotations

import math
import random

import pytest

from streamgen.sizing.cpu_share import shared_decode_seconds


def reference(d: float, company: float, n: int, cores: int, k: int) -> float:
    """The W solving W = d · max(1, (n + min(k, company·n/W)) / m): the right side falls as W grows, so the
    difference rises and bisection between d and the all-busy bound finds the one root."""
    m = max(n, cores)

    def gap(w: float) -> float:
        return w - d * max(1.0, (n + min(k, company * n / w)) / m)

    lo, hi = d, d * max(1.0, (n + k) / m) + 1e-12
    if gap(lo) >= 0:
        return lo
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def test_two_decoders_on_two_cores_share_them_with_the_scorer_as_the_quadratic_says() -> None:
    # n = cores = 2, 6 s of decoding, 3 CPU-s of scoring spread over the span: 2W² − 12W − 36 = 0
    assert shared_decode_seconds(6.0, 3.0, workers=2, cores=2, processes=1) == pytest.approx((12 + math.sqrt(144 + 288)) / 4)


def test_a_company_larger_than_its_processes_can_do_in_the_span_keeps_them_busy_throughout() -> None:
    # 1000 CPU-s of scoring beside 10 s of decoding: the one scorer is busy the whole span, three processes on two
    # cores: every decode at 2/3 of a core
    assert shared_decode_seconds(10.0, 1000.0, workers=2, cores=2, processes=1) == pytest.approx(10.0 * 3 / 2)
    assert shared_decode_seconds(10.0, 1000.0, workers=2, cores=2, processes=2) == pytest.approx(10.0 * 4 / 2)


def test_spare_cores_take_the_company_first() -> None:
    # one decoder on two cores: the scorer has the other core, however much it scores
    assert shared_decode_seconds(10.0, 1000.0, workers=1, cores=2, processes=1) == 10.0
    assert shared_decode_seconds(10.0, 0.5, workers=1, cores=4, processes=3) == 10.0


def test_no_company_or_no_decoding_changes_nothing() -> None:
    assert shared_decode_seconds(7.0, 0.0, workers=2, cores=2) == 7.0
    assert shared_decode_seconds(0.0, 5.0, workers=2, cores=2) == 0.0


def test_more_decoders_than_cores_are_already_shared_in_the_calibration() -> None:
    # four decoders on two cores: the calibration timed them four at once (d holds the 2× of that sharing); the
    # company adds what it takes beyond: W = d (4 + o) / 4
    d, company = 20.0, 4.0
    w = shared_decode_seconds(d, company, workers=4, cores=2, processes=1)
    assert w == pytest.approx(d * (4 + company * 4 / w) / 4)


@pytest.mark.parametrize("seed", range(5))
def test_the_closed_form_equals_the_bisection_reference_on_generated_runs(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        d, company = rng.uniform(0.01, 500), rng.choice([0.0, rng.uniform(0, 50), rng.uniform(0, 5000)])
        n, cores, k = rng.randint(1, 8), rng.randint(1, 8), rng.randint(1, 4)
        got = shared_decode_seconds(d, company, workers=n, cores=cores, processes=k)
        assert got == pytest.approx(reference(d, company, n, cores, k), rel=1e-9, abs=1e-9), (d, company, n, cores, k)
