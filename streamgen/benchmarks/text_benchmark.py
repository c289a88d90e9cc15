"""The shared shape of text benchmarks scored by token F1 (CoEdIT, chat) or exact match (data benchmarks).

A text benchmark module supplies a :class:`TextTask` (rows → examples, example → references);
:class:`TextBenchmark` segments the request and scores the best normalised token F1 of the answer
against the references, in process (no code runs); with ``exact`` it scores 1.0 when the normalised
answer equals a normalised reference (status ``passed``), else 0.0 (``failed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from streamgen.benchmarks.base import Example, Score
from streamgen.benchmarks.sources import read_rows
from streamgen.config import BenchmarkConfig
from streamgen.requests.segment import segment
from streamgen.scoring.extract import extract_text
from streamgen.scoring.metrics import best_exact_match, best_token_f1

SCORER_VERSION = "1"
"""The shared part of every text benchmark's scorer version: text extraction and normalised token F1
(or exact match).
Bump it when a change there alters any score; a benchmark's own part is its task's."""


class TextTask(Protocol):
    """The benchmark-specific functions of a text benchmark."""

    @property
    def scorer_version(self) -> str:
        """The task's part of the scorer version (its extraction, programs or references)."""
        ...

    def examples(self, cfg: BenchmarkConfig, rows: list[dict[str, Any]], data_dir: Path) -> list[Example]:
        """Rendered examples from raw rows (``data_dir`` for side files such as answer sets)."""
        ...

    def references(self, example: Example) -> list[str]:
        """Every acceptable answer; the score is the best F1 over them."""
        ...


@dataclass(frozen=True)
class TextBenchmark:
    """A :class:`~streamgen.benchmarks.Benchmark` scored by normalised token F1."""

    cfg: BenchmarkConfig
    task: TextTask
    exact: bool = False  # exact match instead of token F1

    def examples(self, data_dir: Path | None = None, limit: int | None = None) -> list[Example]:
        from streamgen.config import resolve_data_dir

        examples = self.task.examples(self.cfg, read_rows(self.cfg, data_dir), resolve_data_dir(data_dir))
        return examples if limit is None else examples[:limit]

    def segments(self, example: Example) -> list[str]:
        return segment(example.request)

    def problems(self) -> list[str]:
        return []  # F1 needs nothing outside this process

    def reference_answer(self, example: Example) -> str:
        return example.reference

    @property
    def scorer_version(self) -> str:
        return f"{self.cfg.module}:{self.task.scorer_version}+{'exact' if self.exact else 'f1'}:{SCORER_VERSION}"

    def score(self, example: Example, answer: str) -> Score:
        # a reference that is only a fenced block (some MT-Bench JSON answers) is read like such an answer
        refs = [extract_text(r) for r in self.task.references(example)]
        if self.exact:
            match = best_exact_match(extract_text(answer), refs)
            return Score(quality=match, status="passed" if match else "failed", detail="", backend=None)
        return Score(quality=best_token_f1(extract_text(answer), refs), status="f1", detail="", backend=None)

    def score_many(self, examples: Sequence[Example], answers: Sequence[str], *,
                   workers: int = 1) -> list[Score]:
        del workers  # F1 is cheap and runs in process
        return [self.score(e, a) for e, a in zip(examples, answers, strict=True)]
