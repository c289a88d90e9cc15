"""Refuse training data that belongs to an evaluation split (paper §7: adaptation corpora are disjoint
from the evaluation suite).

Two checks, both before any model is loaded:

- **by source**: a benchmark-rendered source must be MBPP (its train split, task ids 601–974); every
  other benchmark module (HumanEval, CanItEdit, DS-1000, CoEdIT, chat) is an evaluation set;
- **by row**: every raw row is matched against the shapes of the evaluation data — an MBPP row
  (``task_id`` + ``test_list``) outside 601–974, a HumanEval row (``HumanEval/…`` ids or its fields),
  a CanItEdit row (``before``/``after`` + an instruction; its licence also forbids training on it),
  a DS-1000 row (``code_context``/``reference_code`` or its ``library_problem_id``).

- **by content**: every configured benchmark without a training split (``configs/benchmarks/*.yaml``,
  data-only ones included, no per-benchmark code) contributes the normalised texts of its evaluation
  examples: the streamed request, the reference (and a fenced one's body) and, for a data benchmark,
  the raw values of its identity fields (``options.identity_fields``, by default the fields its
  templates read). A training row any of whose string values (nested ones too) equals one of them is
  refused, naming the benchmark and the example.

A match raises :class:`LeakageError` listing the offending rows (the first few) and how to fix it.
Texts are compared after collapsing whitespace and case; shorter than :data:`MIN_CHARS` they identify
nothing (a one-word answer). A corpus that paraphrases an evaluation item is not caught
(docs/adaptation.md).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.config import ConfigError

logger = logging.getLogger(__name__)

MBPP_TRAIN_IDS = range(601, 975)
"""MBPP's training split (Austin et al. 2021): task ids 601–974; 1–600 are prompt, test and validation."""

TRAINABLE_BENCHMARK_MODULES = frozenset({"mbpp"})
"""Benchmark modules with a training split; their rows are still checked one by one."""

_SHOWN = 5
MIN_CHARS = 24
"""Normalised texts shorter than this identify no evaluation row (``"True"``, a one-word answer)."""
_DEPTH = 4  # how deep a row's nested lists and mappings are searched for strings


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


def _shown(found: list[str]) -> str:
    return ", ".join(found[:_SHOWN]) + (f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else "")


def check_rows(rows: Iterable[Mapping[str, Any]], source: str, index: EvaluationIndex | None = None) -> None:
    """Raise :class:`LeakageError` when any row belongs to an evaluation split: by shape (the built-in
    benchmarks), then by content against ``index`` (every configured benchmark) when given."""
    rows = list(rows)
    found = [hit for hit in map(evaluation_split, rows) if hit]
    if found:
        raise LeakageError([f"source {source}: {len(found)} row(s) belong to an evaluation split ({_shown(found)}); "
                            "train only on MBPP 601–974 (data file train/mbpp_train.jsonl, or the mbpp "
                            "benchmark with options.split=train) or on a corpus disjoint from the "
                            "evaluation suite"], "training data leaks into evaluation")
    repeated = [hit for hit in map(index.owner, rows) if hit] if index is not None else []
    if repeated:
        benchmarks = sorted({hit.split(" ", 2)[1] for hit in repeated})
        raise LeakageError([f"source {source}: {len(repeated)} row(s) repeat evaluation examples of benchmark(s) "
                            f"{', '.join(benchmarks)} ({_shown(repeated)}); remove them from the training data, "
                            "or train on a corpus disjoint from the evaluation suite"],
                           "training data leaks into evaluation")


def normalised_key(text: str) -> str | None:
    """The hash a text is compared by (whitespace runs collapsed, case folded); None when too short."""
    norm = " ".join(text.split()).casefold()
    return hashlib.sha256(norm.encode()).hexdigest() if len(norm) >= MIN_CHARS else None


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif depth < _DEPTH and isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v, depth + 1)
    elif depth < _DEPTH and isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v, depth + 1)


@dataclass(frozen=True)
class EvaluationIndex:
    """Normalised-text hash → the evaluation example it identifies (``benchmark NAME example ID``)."""

    owners: Mapping[str, str]

    def owner(self, row: Mapping[str, Any]) -> str | None:
        """The evaluation example one of ``row``'s string values repeats, or None."""
        for text in _strings(row):
            key = normalised_key(text)
            if key is not None and key in self.owners:
                return self.owners[key]
        return None


def evaluation_index(data_dir: Path) -> EvaluationIndex:
    """The texts of every configured benchmark's evaluation examples (benchmarks with a training split
    are checked by shape instead; a hub or unreadable benchmark is logged and left out)."""
    from streamgen.benchmarks import BenchmarkDataError, load_benchmark
    from streamgen.benchmarks.from_data import identity_texts
    from streamgen.config import available, benchmark_config
    from streamgen.scoring.extract import extract_text

    owners: dict[str, str] = {}
    for name in available("benchmarks"):
        cfg = benchmark_config(name)
        if cfg.module in TRAINABLE_BENCHMARK_MODULES or cfg.source != "local":
            continue
        bench = load_benchmark(cfg)
        try:
            examples = bench.examples(data_dir)
        except BenchmarkDataError as exc:
            logger.warning("leakage guard: benchmark %s left out, its data cannot be read (%s)", name, exc)
            continue
        for ex in examples:
            reference = bench.reference_answer(ex)
            for text in (ex.request, reference, extract_text(reference), *identity_texts(ex)):
                if (key := normalised_key(text)) is not None:
                    owners.setdefault(key, f"benchmark {name} example {ex.example_id}")
    return EvaluationIndex(owners)


def check_benchmark_source(benchmark: str, module: str) -> None:
    """Raise :class:`LeakageError` for a benchmark module that has no training split."""
    if module not in TRAINABLE_BENCHMARK_MODULES:
        raise LeakageError([f"source.benchmark={benchmark} (module {module}) is an evaluation benchmark with no "
                            "training split: use source.benchmark=mbpp with options.split=train, or "
                            "source.kind=rows over a training corpus"], "training data leaks into evaluation")
