"""The budget line (analysis/answer_budget.py, analysis/sql/answer_budget.sql) against a deliberately simple
Python reference: the count ``workflows/full_grid.py`` computed in Python before issue 53, kept here as it was.

Generated results directories hold what a real one can: rows of models and benchmarks outside the grid,
error rows (no base answer length), rows without settings, cells with different budgets, files of an older
schema missing a column, one missing both, a file that is not Parquet, and hive-style folder names whose
parts are not columns.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.answer_budget import BudgetCount, budget_count, budget_line
from streamgen.results.result_files import readable_files

MODELS = ["smollm2", "tiny-llama", "other"]
BENCHMARKS = ["mbpp", "chat", "coedit"]


def reference_line(results_dir: Path, models: list[str], benchmarks: list[str]) -> str:
    """workflows/full_grid.py's budget_line before issue 53 (a grid's fields as arguments)."""
    files = readable_files(results_dir, "pairs", warn=False).files
    cols = ["model", "benchmark", "base_answer_tokens", "cell_settings"]
    rows = [r for f in files if set(cols) <= set(pq.read_schema(f).names)
            for r in pq.read_table(f, columns=cols).to_pylist()
            if r["model"] in models and r["benchmark"] in benchmarks
            and r["base_answer_tokens"] is not None and r["cell_settings"] is not None]
    early = sum(r["base_answer_tokens"] < json.loads(r["cell_settings"])["max_new_tokens"] for r in rows)
    share = f" ({early / len(rows):.0%})" if rows else ""
    return f"base answers ending before the answer budget (EOS): {early} of {len(rows)} rows{share}"


def _write(root: Path, name: str, columns: dict[str, list]) -> None:
    n = len(next(iter(columns.values())))
    keys = {"run_id": ["r"] * n, "cell_id": [f"c{i}" for i in range(n)], "example_id": [f"e{i}" for i in range(n)]}
    path = root / "pairs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({**keys, **columns}), path)


def make_results(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    for f in range(rng.randint(1, 6)):
        n = rng.randint(0, 12)
        budget = rng.choice([8, 64, 192])
        settings = json.dumps({"max_new_tokens": budget, "acceptance": "greedy"})
        cols = {"model": [rng.choice(MODELS) for _ in range(n)],
                "benchmark": [rng.choice(BENCHMARKS) for _ in range(n)],
                "base_answer_tokens": pa.array([None if rng.random() < 0.2 else rng.randint(0, budget)
                                                for _ in range(n)], pa.int64()),
                "cell_settings": pa.array([None if rng.random() < 0.1 else settings for _ in range(n)], pa.string())}
        if rng.random() < 0.25:  # an older file: one of the columns the count needs is missing
            del cols[rng.choice(["base_answer_tokens", "cell_settings", "model"])]
        _write(root, f"model=m{f}/benchmark=b{f}/s{f}.parquet", cols)
    (root / "pairs" / "junk.parquet").write_bytes(b"not parquet")


def test_the_generated_directories_reach_every_case(tmp_path: Path) -> None:
    """Over the seeds the comparison runs on, each kind of row and file occurs (so the comparison covers it)."""
    seen: set[str] = set()
    for seed in range(40):
        root = tmp_path / str(seed)
        make_results(root, seed)
        for f in readable_files(root, "pairs", warn=False).files:
            table = pq.read_table(f)
            names = set(table.schema.names)
            if not {"base_answer_tokens", "cell_settings", "model"} <= names:
                seen.add("missing column")
                continue
            for r in table.to_pylist():
                seen.add("null tokens" if r["base_answer_tokens"] is None else
                         "null settings" if r["cell_settings"] is None else
                         "outside" if r["model"] == "other" or r["benchmark"] == "coedit" else
                         "early" if r["base_answer_tokens"] < json.loads(r["cell_settings"])["max_new_tokens"] else
                         "at budget")
    assert seen == {"missing column", "null tokens", "null settings", "outside", "early", "at budget"}


@pytest.mark.parametrize("seed", range(40))
def test_sql_equals_the_python_reference(tmp_path: Path, seed: int) -> None:
    make_results(tmp_path, seed)
    models, benchmarks = ["smollm2", "tiny-llama"], ["mbpp", "chat"]
    assert budget_line(tmp_path, models, benchmarks) == reference_line(tmp_path, models, benchmarks)


def test_counts_by_hand(tmp_path: Path) -> None:
    settings = json.dumps({"max_new_tokens": 64})
    _write(tmp_path, "a.parquet", {"model": ["smollm2"] * 5, "benchmark": ["mbpp", "mbpp", "mbpp", "chat", "chat"],
                                   "base_answer_tokens": [10, 64, None, 63, 5],
                                   "cell_settings": [settings, settings, settings, settings, None]})
    _write(tmp_path, "b.parquet", {"model": ["other", "smollm2"], "benchmark": ["mbpp", "coedit"],
                                   "base_answer_tokens": [1, 1], "cell_settings": [settings, settings]})
    _write(tmp_path, "c.parquet", {"model": ["smollm2"], "benchmark": ["mbpp"], "base_answer_tokens": [1]})
    # counted: 10, 64 (mbpp) and 63 (chat); early: 10 and 63. Not: None tokens, None settings, other, coedit, c.parquet
    assert budget_count(tmp_path, ["smollm2"], ["mbpp", "chat"]) == BudgetCount(early=2, rows=3)
    assert budget_line(tmp_path, ["smollm2"], ["mbpp", "chat"]) == \
        "base answers ending before the answer budget (EOS): 2 of 3 rows (67%)"


def test_an_empty_directory_counts_nothing(tmp_path: Path) -> None:
    assert budget_line(tmp_path, ["smollm2"], ["mbpp"]) == "base answers ending before the answer budget (EOS): 0 of 0 rows"
