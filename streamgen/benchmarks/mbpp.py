"""MBPP (Austin et al. 2021), full (974 rows) or sanitized (427 rows): write a Python function.

Request (Austin et al. format, specification first): the task text, then the test asserts in a
fenced block (they name the function). Reference: the reference ``code``, fenced. Test program:
test imports (sanitized) + solution + test setup (full) + the asserts; exit 0 = pass.
``options.variant``: ``full`` | ``sanitized``; ``options.split``: ``all`` | ``prompt`` (ids 1–10) |
``test`` (11–510) | ``validation`` (511–600) | ``train`` (601–974, what adaptation trains on).
"""

from __future__ import annotations

import re
from typing import Any

from streamgen.benchmarks.base import BenchmarkDataError, Example
from streamgen.benchmarks.code_benchmark import CodeBenchmark
from streamgen.benchmarks.sources import render
from streamgen.config import BenchmarkConfig
from streamgen.scoring.extract import Extracted, extract_code, fence

SPLITS = {"all": (1, 974), "prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}
_TEXT_FIELD = {"full": "text", "sanitized": "prompt"}


def entry_point(code: str, tests: list[str]) -> str:
    """The function under test: the one the reference defines that the asserts call."""
    defined = re.findall(r"^\s*def\s+(\w+)", code, re.MULTILINE)
    called = " ".join(tests)
    for name in defined:
        if re.search(rf"\b{re.escape(name)}\s*\(", called):
            return name
    return defined[0] if defined else ""


class MbppTask:
    """The MBPP-specific functions of :class:`CodeBenchmark`."""

    scorer_version = "1"  # bump when a change here alters any verdict (analysis.rescore re-scores)

    def examples(self, cfg: BenchmarkConfig, rows: list[dict[str, Any]]) -> list[Example]:
        variant, split = cfg.options.get("variant", "full"), cfg.options.get("split", "all")
        if variant not in _TEXT_FIELD or split not in SPLITS:
            raise BenchmarkDataError(f"benchmark {cfg.name}: options.variant={variant!r} must be one of "
                                     f"{list(_TEXT_FIELD)} and options.split={split!r} one of {list(SPLITS)}")
        lo, hi = SPLITS[split]
        return [self.example(cfg, r, variant) for r in rows if lo <= int(r["task_id"]) <= hi]

    @staticmethod
    def example(cfg: BenchmarkConfig, row: dict[str, Any], variant: str) -> Example:
        tests, code = list(row["test_list"]), row["code"]
        fields = {"text": row[_TEXT_FIELD[variant]], "tests": fence("\n".join(tests)),
                  "tests_plain": "\n".join(tests)}
        return Example(
            benchmark=cfg.name,
            example_id=f"mbpp/{row['task_id']}",
            history=(),
            request=render(cfg, fields),
            reference=fence(code),
            payload={"tests": tests, "imports": list(row.get("test_imports", [])),
                     "setup": row.get("test_setup_code", ""), "entry_point": entry_point(code, tests)},
            system_prompt=cfg.system_prompt,
        )

    def extract(self, example: Example, answer: str) -> Extracted:
        return extract_code(answer, entry_point=example.payload["entry_point"] or None)

    def program(self, example: Example, code: str) -> str:
        p = example.payload
        parts = ["\n".join(p["imports"]), code, p["setup"], "\n".join(p["tests"])]
        return "\n".join(parts) + "\n"


def build(cfg: BenchmarkConfig) -> CodeBenchmark:
    return CodeBenchmark(cfg, MbppTask())
