"""Reference checks: run every gold answer of a benchmark through the real scorer.

The reference (shaped like a chat answer) goes through the same extraction, program builder and
sandbox as a model's answer would, so a pass count below the expected one points at the scorer,
the data or a missing package (see ``docs/benchmarks.md`` for the expected counts).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streamgen.benchmarks import Benchmark, Example, Score

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Failure:
    example_id: str
    status: str
    detail: str


@dataclass(frozen=True)
class CheckReport:
    """How many answers passed (or, for F1 benchmarks, scored 1.0) and which did not."""

    benchmark: str
    total: int
    passed: int
    statuses: dict[str, int]
    failures: tuple[Failure, ...]
    wall_s: float

    def line(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        return f"{self.benchmark}: {self.passed}/{self.total} pass ({counts}) in {self.wall_s:.1f} s"


def _passed(score: Score) -> bool:
    return score.status == "passed" or (score.status == "f1" and score.quality >= 1.0 - 1e-9)


def check_answers(bench: Benchmark, examples: Sequence[Example], answer: Callable[[Example], str], *,
                  workers: int = 1) -> CheckReport:
    """Score ``answer(example)`` for every example with the benchmark's real scorer."""
    start = time.perf_counter()
    scores = bench.score_many(list(examples), [answer(e) for e in examples], workers=workers)
    failures = tuple(Failure(e.example_id, s.status, s.detail[-500:])
                     for e, s in zip(examples, scores, strict=True) if not _passed(s))
    return CheckReport(
        benchmark=bench.cfg.name,
        total=len(examples),
        passed=len(examples) - len(failures),
        statuses=dict(Counter(s.status for s in scores)),
        failures=failures,
        wall_s=time.perf_counter() - start,
    )


def check_references(bench: Benchmark, examples: Sequence[Example], *, workers: int = 1) -> CheckReport:
    """:func:`check_answers` with the benchmark's own reference answers."""
    return check_answers(bench, examples, bench.reference_answer, workers=workers)
