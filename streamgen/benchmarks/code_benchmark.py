"""The shared shape of execution-scored benchmarks (HumanEval, MBPP, CanItEdit, DS-1000).

A code benchmark module supplies a :class:`CodeTask` (rows → examples, answer → code, code → test
program); :class:`CodeBenchmark` does the rest the same way for all of them: segmenting the request,
extracting code, running the test program in the sandbox (retrying sandbox errors) and scoring
pass@1. An answer with no code at all fails without running anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from streamgen.benchmarks.base import Example, Score
from streamgen.benchmarks.execution import Runner
from streamgen.benchmarks.sources import read_rows
from streamgen.config import BenchmarkConfig, ConfigError
from streamgen.requests.segment import segment
from streamgen.scoring.extract import Extracted

NO_CODE = "no code in the answer"
SCORER_VERSION = "1"
"""The shared part of every code benchmark's scorer version: code extraction, the sandbox's verdicts,
pass@1. Bump it when a change there alters any verdict; a benchmark's own part is its task's."""


class CodeTask(Protocol):
    """The benchmark-specific functions of a code benchmark."""

    @property
    def scorer_version(self) -> str:
        """The task's part of the scorer version (its extraction, programs or references)."""
        ...

    def examples(self, cfg: BenchmarkConfig, rows: list[dict[str, Any]]) -> list[Example]:
        """Rendered examples from raw rows (filtering a split where the benchmark has one)."""
        ...

    def extract(self, example: Example, answer: str) -> Extracted:
        """The code to run from a chat answer."""
        ...

    def program(self, example: Example, code: str) -> str:
        """The full test program: solution + tests + entry-point check; exit 0 = pass."""
        ...


@dataclass(frozen=True)
class CodeBenchmark:
    """A :class:`~streamgen.benchmarks.Benchmark` scored by running tests in the sandbox."""

    cfg: BenchmarkConfig
    task: CodeTask

    def examples(self, data_dir: Path | None = None, limit: int | None = None) -> list[Example]:
        examples = self.task.examples(self.cfg, read_rows(self.cfg, data_dir))
        return examples if limit is None else examples[:limit]

    def segments(self, example: Example) -> list[str]:
        return segment(example.request)

    def reference_answer(self, example: Example) -> str:
        return example.reference

    @property
    def scorer_version(self) -> str:
        return f"{self.cfg.module}:{self.task.scorer_version}+code:{SCORER_VERSION}"

    def runner(self) -> Runner:
        return Runner.from_config(self.cfg)

    def problems(self) -> list[str]:
        try:
            self.runner()
        except ConfigError as exc:
            return list(exc.problems)
        return []

    def program_or_verdict(self, example: Example, answer: str) -> tuple[str | None, Score | None, str]:
        """``(program, None, how)`` to run, or ``(None, verdict, how)`` when there is nothing to run."""
        extracted = self.task.extract(example, answer)
        if extracted.how == "none":
            return None, Score(0.0, "failed", NO_CODE), extracted.how
        return self.task.program(example, extracted.code), None, extracted.how

    def score(self, example: Example, answer: str) -> Score:
        return self.score_many([example], [answer])[0]

    def score_many(self, examples: Sequence[Example], answers: Sequence[str], *,
                   workers: int = 1) -> list[Score]:
        planned = [self.program_or_verdict(e, a) for e, a in zip(examples, answers, strict=True)]
        to_run = [p for p, _, _ in planned if p is not None]
        ran = iter(self.runner().run_many(to_run, workers=workers) if to_run else [])
        scores = []
        for program, verdict, how in planned:
            score = verdict if program is None else next(ran)
            assert score is not None
            scores.append(dataclasses.replace(score, detail=f"[{how}] {score.detail}"))
        return scores
