"""Cost of one meter reading after many forwards: running totals (now) vs summing the log (before issue 12).

    python bench/bench_meter.py                 # 10^6 calls; 20 summed readings, 200,000 from the totals
    python bench/bench_meter.py calls=100000 summed_readings=200

A cached decoder's meter lives as long as its actor, and every span takes two readings. Both ways are
timed side by side in one run on the same meter, and their readings are checked to be identical.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from itertools import count

from streamgen.config import load
from streamgen.decoding.meter import ForwardMeter, MeterReading


@dataclass(frozen=True)
class BenchConfig:
    calls: int = 1_000_000
    summed_readings: int = 20  # each one passes over the whole log
    total_readings: int = 200_000  # enough for a steady mean of a ~µs operation


def summed_reading(meter: ForwardMeter) -> MeterReading:
    """The reading as ForwardMeter computed it before issue 12: a pass over the whole log."""
    return MeterReading(len(meter.calls), sum(c.tokens_fed for c in meter.calls), sum(c.wall_s for c in meter.calls))


def filled_meter(calls: int) -> ForwardMeter:
    """A meter after ``calls`` forwards, on a fake clock whose calls take uneven fractional times."""
    ticks = count()
    meter = ForwardMeter(clock=lambda: next(ticks) ** 1.5 * 1.1e-4)  # uneven, inexact float steps
    for i in range(calls):
        with meter.call("decode", 1 + i % 5):
            pass
    return meter


def ns_per_reading(read: object, meter: ForwardMeter, readings: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(readings):
        read(meter)  # type: ignore[operator]
    return (time.perf_counter_ns() - start) / readings


def main(argv: list[str]) -> int:
    cfg = load(BenchConfig, overrides=argv)
    meter = filled_meter(cfg.calls)
    assert meter.reading() == summed_reading(meter), "running totals must give the summed numbers exactly"
    before = ns_per_reading(summed_reading, meter, cfg.summed_readings)
    after = ns_per_reading(ForwardMeter.reading, meter, cfg.total_readings)
    print(f"meter reading at {cfg.calls:,} calls: summing the log {before:,.0f} ns, running totals {after:,.0f} ns "
          f"({before / after:,.0f}x); readings identical")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
