"""CoEdIT (Raheja et al. 2023): instruction-guided text editing, scored by token F1.

Request: ``src`` (``"<instruction>: <text>"``, CoEdIT's own shape) rendered by the template; the
default puts the instruction on its own line (``{instruction}:\n{text}``) so that it arrives first
and the text to edit follows (with ``{src}`` on one line nearly every request is a single segment and
would be excluded). Reference:
``tgt``; where a row carries several human references (``refs``, the JFLEG stand-in has four) the
score is the best F1 over them. Sources: the hub dataset ``grammarly/coedit`` (fields ``_id``,
``task``, ``src``, ``tgt``) or, offline, the JFLEG stand-in in CoEdIT's shape
(``coedit/jfleg_test_coedit_format.jsonl``, licence CC BY-NC-SA 4.0).
``options.tasks``: keep only these CoEdIT task kinds (e.g. ``[gec]``); empty keeps all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamgen.benchmarks.base import Example
from streamgen.benchmarks.sources import render
from streamgen.benchmarks.text_benchmark import TextBenchmark
from streamgen.config import BenchmarkConfig


def split_src(src: str) -> dict[str, str]:
    """``{"instruction", "text"}`` of a ``"<instruction>: <text>"`` source (no colon: no instruction)."""
    instruction, sep, text = src.partition(": ")
    if not sep:
        return {"instruction": "", "text": src}
    return {"instruction": instruction, "text": text}


def _request(cfg: BenchmarkConfig, row: dict[str, Any]) -> str:
    parts = split_src(row["src"])
    if not parts["instruction"]:  # no "<instruction>: " prefix: the text is the whole request
        return row["src"]
    return render(cfg, {"src": row["src"], "task": row.get("task", ""), **parts})


class CoeditTask:
    """The CoEdIT-specific functions of :class:`TextBenchmark`."""

    scorer_version = "1"  # bump when a change here alters any verdict (analysis.rescore re-scores)

    def examples(self, cfg: BenchmarkConfig, rows: list[dict[str, Any]], data_dir: Path) -> list[Example]:
        del data_dir
        tasks = set(cfg.options.get("tasks") or [])
        return [self.example(cfg, r) for r in rows if not tasks or r.get("task") in tasks]

    @staticmethod
    def example(cfg: BenchmarkConfig, row: dict[str, Any]) -> Example:
        refs = list(row.get("refs") or [row["tgt"]])
        return Example(
            benchmark=cfg.name,
            example_id=str(row["_id"]),
            history=(),
            request=_request(cfg, row),
            reference=row["tgt"],
            payload={"refs": refs, "task": row.get("task", "")},
            system_prompt=cfg.system_prompt,
        )

    def references(self, example: Example) -> list[str]:
        return list(example.payload["refs"])


def build(cfg: BenchmarkConfig) -> TextBenchmark:
    return TextBenchmark(cfg, CoeditTask())
