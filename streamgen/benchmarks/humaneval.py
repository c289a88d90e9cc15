"""HumanEval (Chen et al. 2021): complete a Python function from its signature and docstring.

Request: the prompt itself (imports, signature, docstring with doctests): the specification first,
given to an instruct model; the answer-format instruction is the benchmark's system prompt, so the
last streamed segment is real content. Reference: ``prompt + canonical_solution``, fenced.
Test program (upstream): prompt + solution + ``test`` + ``check(entry_point)``; exit 0 = pass.
A chat answer may be the whole function (fenced or bare) or only its body (completion-only).
"""

from __future__ import annotations

from typing import Any

from streamgen.benchmarks.base import Example
from streamgen.benchmarks.code_benchmark import CodeBenchmark
from streamgen.benchmarks.sources import render
from streamgen.config import BenchmarkConfig
from streamgen.scoring.extract import Extracted, extract_code, fence


class HumanEvalTask:
    """The HumanEval-specific functions of :class:`CodeBenchmark`."""

    scorer_version = "1"  # bump when a change here alters any verdict (analysis.rescore re-scores)

    def examples(self, cfg: BenchmarkConfig, rows: list[dict[str, Any]]) -> list[Example]:
        return [self.example(cfg, r) for r in rows]

    @staticmethod
    def example(cfg: BenchmarkConfig, row: dict[str, Any]) -> Example:
        prompt = row["prompt"]
        return Example(
            benchmark=cfg.name,
            example_id=row["task_id"],
            history=(),
            request=render(cfg, {"prompt": prompt, "entry_point": row["entry_point"]}),
            reference=fence(prompt + row["canonical_solution"]),
            payload={"prompt": prompt, "test": row["test"], "entry_point": row["entry_point"]},
            system_prompt=cfg.system_prompt,
        )

    def extract(self, example: Example, answer: str) -> Extracted:
        p = example.payload
        return extract_code(answer, entry_point=p["entry_point"], prefix=p["prompt"])

    def program(self, example: Example, code: str) -> str:
        p = example.payload
        # The prompt goes first so its imports and helper functions exist; a full function in the
        # answer then redefines the stub.
        solution = code if code.startswith(p["prompt"]) else p["prompt"] + "\n" + code
        return f"{solution}\n\n{p['test']}\n\ncheck({p['entry_point']})\n"


def build(cfg: BenchmarkConfig) -> CodeBenchmark:
    return CodeBenchmark(cfg, HumanEvalTask())
