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
    reruns: dict[str, int] = field(default_factory=dict)  # load-sensitive id → runs alone it took to pass

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
        rerun = f"; {len(self.reruns)} passed on a rerun alone" if self.reruns else ""
        return (f"{self.benchmark}: {self.passed}/{self.total} pass ({counts}; {known} known failures{rerun}) "
                f"in {self.wall_s:.1f} s: {verdict}")


def _passed(score: Score) -> bool:
    return score.status == "passed" or (score.status == "f1" and score.quality >= 1.0 - 1e-9)


RERUNS = 3  # runs alone a load-sensitive example gets after failing in the parallel batch


def check_answers(bench: Benchmark, examples: Sequence[Example], answer: Callable[[Example], str], *,
                  workers: int = 1) -> CheckReport:
    """Score ``answer(example)`` for every example with the benchmark's real scorer.

    An example the YAML declares in ``options.load_sensitive`` (its tests compare wall-clock times,
    or need most of their time limit) that fails in the parallel batch is run again alone, up to
    ``RERUNS`` times, after the batch: it counts as passed if one of those runs passes, and the
    report says how many runs it took. One that fails every time is a failure like any other.
    """
    start = time.perf_counter()
    sensitive = _declared(bench, "load_sensitive")
    answers = [answer(e) for e in examples]
    scores = list(bench.score_many(list(examples), answers, workers=workers))
    reruns: dict[str, int] = {}
    for i, (e, s) in enumerate(zip(examples, scores, strict=True)):
        if e.example_id not in sensitive or _passed(s) or s.status == "error":
            continue
        for attempt in range(1, RERUNS + 1):
            again = bench.score_many([e], [answers[i]], workers=1)[0]
            if _passed(again):
                logger.info("%s: %s passed on rerun %d alone (%s)", bench.cfg.name, e.example_id,
                            attempt, sensitive[e.example_id])
                scores[i], reruns[e.example_id] = again, attempt
                break
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
        reruns=reruns,
    )


def known_failures(bench: Benchmark) -> dict[str, str]:
    """``options.known_failures`` of the benchmark's YAML: example id → why it cannot pass here."""
    return _declared(bench, "known_failures")


def _declared(bench: Benchmark, option: str) -> dict[str, str]:
    known = bench.cfg.options.get(option) or {}
    if not isinstance(known, Mapping) or not all(isinstance(v, str) for v in known.values()):
        raise ConfigError([f"benchmark {bench.cfg.name}: options.{option} must map example ids "
                           f"to the reason for each, got {known!r}"])
    return {str(k): v for k, v in known.items()}


def check_references(bench: Benchmark, examples: Sequence[Example], *, workers: int = 1) -> CheckReport:
    """:func:`check_answers` with the benchmark's own reference answers."""
    return check_answers(bench, examples, bench.reference_answer, workers=workers)


def reference_sample(bench: Benchmark, examples: Sequence[Example], every: int) -> list[Example]:
    """Every ``every``-th example in data order (so each part of a benchmark laid out by topic is
    reached) plus every declared known failure (so their declared reasons are still checked): the
    default test run's share of a long sweep; ``every=1`` is the whole benchmark."""
    if every < 1:
        raise ValueError(f"every={every}: a sample takes every k-th example, k >= 1")
    known = known_failures(bench)
    return [ex for i, ex in enumerate(examples) if i % every == 0 or ex.example_id in known]


# The sweeps that the default test run samples (tests/streamgen/benchmarks/test_references.py) and workflows/nightly.py
# runs whole: benchmark name → how the test run samples it (every k-th example).
SAMPLED_IN_TESTS: dict[str, int] = {"ds1000": 5}


def full_sweeps(load: Callable[[str], Benchmark], *, workers: int = 2) -> list[CheckReport]:
    """Every reference of each benchmark in :data:`SAMPLED_IN_TESTS`, none left out (the nightly's stage)."""
    reports = []
    for name in SAMPLED_IN_TESTS:
        bench = load(name)
        problems = bench.problems()
        if problems:  # e.g. DS-1000's interpreter is not built: say so, do not report a pass
            raise ConfigError([f"reference sweep of {name}: {p}" for p in problems])
        reports.append(check_references(bench, bench.examples(), workers=workers))
    return reports
