"""DS-1000 (Lai et al. 2023): data-science snippets (pandas, numpy, matplotlib, sklearn, ...).

Request: the upstream prompt (problem text, then the code context, ending ``BEGIN SOLUTION
<code>``): the specification first, given to an instruct model. Reference: ``reference_code``,
fenced. Test program (upstream): ``code_context`` + ``test_execution(solution)`` (+
``test_string(solution)`` where defined); exit 0 = pass. The tests need the old stack of
``scripts/ds1000_env.sh`` (``options.python``), never the system Python's numpy 2 / pandas 3.
"""

from __future__ import annotations

import re
from typing import Any

from streamgen.benchmarks.base import Example
from streamgen.benchmarks.code_benchmark import CodeBenchmark
from streamgen.benchmarks.sources import render
from streamgen.config import BenchmarkConfig
from streamgen.scoring.extract import Extracted, extract_code, fence

# Upstream's postprocess cuts at these; "\nEND SOLUTION" only at a line start: function-style
# references contain "### END SOLUTION" comments that must stay.
STOPS = ("</code>", "\nEND SOLUTION")
_LEADING_MARKERS = re.compile(r"^\s*(?:BEGIN SOLUTION\s*)?(?:<code>\s*)?")


class Ds1000Task:
    """The DS-1000-specific functions of :class:`CodeBenchmark`."""

    scorer_version = "1"  # bump when a change here alters any verdict (analysis.rescore re-scores)

    def examples(self, cfg: BenchmarkConfig, rows: list[dict[str, Any]]) -> list[Example]:
        return [self.example(cfg, r) for r in rows]

    @staticmethod
    def example(cfg: BenchmarkConfig, row: dict[str, Any]) -> Example:
        meta = row["metadata"]
        return Example(
            benchmark=cfg.name,
            example_id=f"ds1000/{meta['problem_id']}",
            history=(),
            request=render(cfg, {"prompt": row["prompt"]}),
            reference=fence(row["reference_code"]),
            payload={"code_context": row["code_context"], "library": meta["library"]},
            system_prompt=cfg.system_prompt,
        )

    def extract(self, example: Example, answer: str) -> Extracted:
        got = extract_code(_LEADING_MARKERS.sub("", answer, count=1), stops=STOPS)
        # Some contexts continue the inserted line ("[insert].numpy()"): no trailing newline.
        return Extracted(got.code.rstrip(), got.how)

    def program(self, example: Example, code: str) -> str:
        context = example.payload["code_context"]
        program = f"{context}\ntest_execution({code!r})\n"
        if re.search(r"^def test_string\(", context, re.MULTILINE):
            program += f"test_string({code!r})\n"
        return program


def build(cfg: BenchmarkConfig) -> CodeBenchmark:
    return CodeBenchmark(cfg, Ds1000Task())
