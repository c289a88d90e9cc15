"""CanItEdit (Cassano et al. 2024): edit a Python program as instructed.

Request: the program first (one fenced block, so it arrives as one segment), then the instruction
(``options.instruction``: ``descriptive`` by default, or ``lazy``), which is what streams.
Reference: the ``after`` program, fenced. Test program (upstream, MultiPL-E style): the edited
program + the hidden ``tests``; exit 0 = pass. The answer must be the complete edited program.
Licence: evaluation only, never training data; do not publish the tests.
"""

from __future__ import annotations

from typing import Any

from streamgen.benchmarks.base import BenchmarkDataError, Example
from streamgen.benchmarks.code_benchmark import CodeBenchmark
from streamgen.benchmarks.sources import render
from streamgen.config import BenchmarkConfig
from streamgen.scoring.extract import Extracted, extract_code, fence

INSTRUCTIONS = ("descriptive", "lazy")


class CanItEditTask:
    """The CanItEdit-specific functions of :class:`CodeBenchmark`."""

    scorer_version = "1"  # bump when a change here alters any verdict (analysis.rescore re-scores)

    def examples(self, cfg: BenchmarkConfig, rows: list[dict[str, Any]]) -> list[Example]:
        kind = cfg.options.get("instruction", "descriptive")
        if kind not in INSTRUCTIONS:
            raise BenchmarkDataError(f"benchmark {cfg.name}: options.instruction={kind!r} must be one of {INSTRUCTIONS}")
        return [self.example(cfg, r, kind) for r in rows]

    @staticmethod
    def example(cfg: BenchmarkConfig, row: dict[str, Any], kind: str) -> Example:
        fields = {"program": fence(row["before"]), "before": row["before"],
                  "instruction": row[f"instruction_{kind}"]}
        return Example(
            benchmark=cfg.name,
            example_id=row["full_name"],
            history=(),
            request=render(cfg, fields),
            reference=fence(row["after"]),
            payload={"tests": row["tests"], "before": row["before"],
                     "libraries": list(row.get("taxonomy", {}).get("libraries", []))},
            system_prompt=cfg.system_prompt,
        )

    def extract(self, example: Example, answer: str) -> Extracted:
        return extract_code(answer)

    def program(self, example: Example, code: str) -> str:
        return f"{code}\n\n{example.payload['tests']}\n"


def unedited_answer(example: Example) -> str:
    """The ``before`` program as an answer: a wrong answer the tests must reject (all but one do)."""
    return fence(example.payload["before"])


def build(cfg: BenchmarkConfig) -> CodeBenchmark:
    return CodeBenchmark(cfg, CanItEditTask())
