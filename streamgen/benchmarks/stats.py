"""Segmentation statistics per benchmark: segments per request and the single-segment share.

These are the numbers in ``docs/segmentation.md`` (``python -m streamgen.benchmarks stats``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from streamgen.benchmarks.base import Benchmark, Example
from streamgen.exclusions import exclusion_reason


@dataclass(frozen=True)
class SegmentationStats:
    """Segments per request over one benchmark; ``excluded``: requests of a single segment."""

    benchmark: str
    requests: int
    mean: float
    median: float
    p90: float
    max: int
    excluded: int
    mean_chars: float

    @property
    def excluded_share(self) -> float:
        return self.excluded / self.requests if self.requests else 0.0


def segmentation_stats(bench: Benchmark, examples: Sequence[Example]) -> SegmentationStats:
    counts = [len(bench.segments(e)) for e in examples] or [0]
    excluded = sum(exclusion_reason(e, bench.segments(e)) is not None for e in examples)
    deciles = statistics.quantiles(counts, n=10, method="inclusive") if len(counts) > 1 else [counts[0]] * 9
    return SegmentationStats(
        benchmark=bench.cfg.name,
        requests=len(examples),
        mean=statistics.fmean(counts),
        median=float(statistics.median(counts)),
        p90=float(deciles[8]),
        max=max(counts),
        excluded=excluded,
        mean_chars=statistics.fmean(len(e.request) for e in examples) if examples else 0.0,
    )


def markdown_table(rows: Sequence[SegmentationStats]) -> str:
    """The statistics as a Markdown table (one row per benchmark)."""
    head = ("| benchmark | requests | segments mean | median | p90 | max | single-segment (excluded) "
            "| request chars mean |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    body = [f"| {r.benchmark} | {r.requests} | {r.mean:.2f} | {r.median:g} | {r.p90:g} | {r.max} | "
            f"{r.excluded} ({100 * r.excluded_share:.1f}%) | {r.mean_chars:.0f} |" for r in rows]
    return "\n".join([head, *body])
