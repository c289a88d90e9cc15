"""Refuse training data that belongs to an evaluation split (paper §7: adaptation corpora are disjoint
from the evaluation suite).

Two checks, both before any model is loaded:

- **by source**: a benchmark-rendered source must be MBPP (its train split, task ids 601–974); every
  other benchmark module (HumanEval, CanItEdit, DS-1000, CoEdIT, chat) is an evaluation set;
- **by row**: every raw row is matched against the shapes of the evaluation data — an MBPP row
  (``task_id`` + ``test_list``) outside 601–974, a HumanEval row (``HumanEval/…`` ids or its fields),
  a CanItEdit row (``before``/``after`` + an instruction; its licence also forbids training on it),
  a DS-1000 row (``code_context``/``reference_code`` or its ``library_problem_id``).

A match raises :class:`LeakageError` listing the offending rows (the first few) and how to fix it.
The check is structural, not a content search: a corpus that paraphrases an evaluation item is not
caught (docs/adaptation.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from streamgen.config import ConfigError

MBPP_TRAIN_IDS = range(601, 975)
"""MBPP's training split (Austin et al. 2021): task ids 601–974; 1–600 are prompt, test and validation."""

TRAINABLE_BENCHMARK_MODULES = frozenset({"mbpp"})
"""Benchmark modules with a training split; their rows are still checked one by one."""

_SHOWN = 5


class LeakageError(ConfigError):
    """Training data includes rows of an evaluation split; the message names them and the fix."""


def _mbpp_task_id(row: Mapping[str, Any]) -> int | None:
    if "test_list" not in row or "task_id" not in row:
        return None
    try:
        return int(row["task_id"])
    except (TypeError, ValueError):
        return None


def evaluation_split(row: Mapping[str, Any]) -> str | None:
    """The evaluation set ``row`` belongs to (e.g. ``"MBPP task 11 (test split)"``), or None."""
    task_id = _mbpp_task_id(row)
    if task_id is not None and task_id not in MBPP_TRAIN_IDS:
        return f"MBPP task {task_id} (outside the train split 601–974)"
    if str(row.get("task_id", "")).startswith("HumanEval/") or {"canonical_solution", "entry_point"} <= set(row):
        return f"HumanEval {row.get('task_id', '?')}"
    if {"before", "after"} <= set(row) and any(k.startswith("instruction") for k in row):
        return f"CanItEdit {row.get('id', row.get('name', '?'))}"
    meta = row.get("metadata")
    if {"code_context", "reference_code"} & set(row) or (isinstance(meta, Mapping) and "library_problem_id" in meta):
        return f"DS-1000 {meta.get('problem_id', '?') if isinstance(meta, Mapping) else '?'}"
    return None


def check_rows(rows: Iterable[Mapping[str, Any]], source: str) -> None:
    """Raise :class:`LeakageError` when any row belongs to an evaluation split."""
    found = [hit for hit in map(evaluation_split, rows) if hit]
    if found:
        shown = ", ".join(found[:_SHOWN]) + (f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else "")
        raise LeakageError([f"source {source}: {len(found)} row(s) belong to an evaluation split ({shown}); "
                            "train only on MBPP 601–974 (data file train/mbpp_train.jsonl, or the mbpp "
                            "benchmark with options.split=train) or on a corpus disjoint from the "
                            "evaluation suite"], "training data leaks into evaluation")


def check_benchmark_source(benchmark: str, module: str) -> None:
    """Raise :class:`LeakageError` for a benchmark module that has no training split."""
    if module not in TRAINABLE_BENCHMARK_MODULES:
        raise LeakageError([f"source.benchmark={benchmark} (module {module}) is an evaluation benchmark with no "
                            "training split: use source.benchmark=mbpp with options.split=train, or "
                            "source.kind=rows over a training corpus"], "training data leaks into evaluation")
