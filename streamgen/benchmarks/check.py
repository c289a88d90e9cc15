"""Reference checks: run every gold answer of a benchmark through the real scorer.

The reference (shaped like a chat answer) goes through the same extraction, program builder and
sandbox as a model's answer would, so a pass count below the expected one points at the scorer,
the data or a missing package (see ``docs/benchmarks.md`` for the expected counts).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from streamgen.benchmarks.base import Benchmark, Example, Score
from streamgen.config import ConfigError

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
    known_failures: dict[str, str] = field(default_factory=dict)  # declared in the YAML: id → why

    @property
    def unexpected(self) -> tuple[Failure, ...]:
        """Failures not declared known, and every sandbox ``error`` (never an expected outcome)."""
        return tuple(f for f in self.failures if f.example_id not in self.known_failures or f.status == "error")

    @property
    def ok(self) -> bool:
        return not self.unexpected

    def line(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        known = len(self.failures) - len(self.unexpected)
        verdict = "OK" if self.ok else f"NOT OK: {len(self.unexpected)} unexpected"
        return (f"{self.benchmark}: {self.passed}/{self.total} pass ({counts}; {known} known failures) "
                f"in {self.wall_s:.1f} s: {verdict}")


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
        known_failures=known_failures(bench),
    )


def known_failures(bench: Benchmark) -> dict[str, str]:
    """``options.known_failures`` of the benchmark's YAML: example id → why it cannot pass here."""
    known = bench.cfg.options.get("known_failures") or {}
    if not isinstance(known, Mapping) or not all(isinstance(v, str) for v in known.values()):
        raise ConfigError([f"benchmark {bench.cfg.name}: options.known_failures must map example ids "
                           f"to the reason each cannot pass, got {known!r}"])
    return {str(k): v for k, v in known.items()}


def check_references(bench: Benchmark, examples: Sequence[Example], *, workers: int = 1) -> CheckReport:
    """:func:`check_answers` with the benchmark's own reference answers."""
    return check_answers(bench, examples, bench.reference_answer, workers=workers)
