"""The embedded default (configs/grid/local.yaml) and the pieces it relies on: per-benchmark example ids,
the docs stating its answer budget, and the end-of-run line counting base answers that end before it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.grid.plan import plan_grid
from streamgen.config import ConfigError, grid_config
from workflows.full_grid import budget_line

ROOT = Path(__file__).resolve().parents[2]
SIX = {"humaneval", "mbpp", "canitedit", "ds1000", "chat", "coedit"}


def test_the_default_runs_all_six_benchmarks_on_chosen_examples() -> None:
    grid = grid_config("local")
    assert set(grid.benchmarks) == SIX
    assert set(grid.examples) == SIX  # every benchmark runs the examples picked for the budget
    plan = plan_grid(grid)
    for bench, ids in grid.examples.items():
        assert list(plan.examples[bench]) == list(ids)  # data order, exactly those
        assert all(plan.excluded[(bench, i)] is None for i in ids)  # none is dropped up front


def test_the_docs_state_the_defaults_answer_budget() -> None:
    budget = f"{grid_config('local').max_new_tokens}-token answer budget"
    assert budget in (ROOT / "README.md").read_text(encoding="utf-8")
    assert budget in (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8")


def test_listed_examples_come_first_and_limit_counts_them() -> None:
    def picked(limit: int) -> list[str]:
        plan = plan_grid(grid_config("smoke", ["examples={mbpp: [mbpp/4, mbpp/2]}", f"limit={limit}",
                                               "models=[tiny-llama]", "benchmarks=[mbpp,humaneval]"]))
        assert list(plan.examples["humaneval"]) == [f"HumanEval/{i}" for i in range(limit)]  # not listed
        return list(plan.examples["mbpp"])

    assert picked(2) == ["mbpp/2", "mbpp/4"]  # exactly the listed ones, in the data's order
    assert picked(1) == ["mbpp/2"]  # the first listed one in the data's order
    assert picked(4) == ["mbpp/1", "mbpp/2", "mbpp/3", "mbpp/4"]  # listed + the first 4 - 2 others


def test_an_unknown_example_id_names_the_benchmark_and_the_fix() -> None:
    with pytest.raises(ConfigError) as err:
        plan_grid(grid_config("smoke", ["examples={mbpp: [mbpp/1, '7']}", "models=[tiny-llama]"]))
    text = str(err.value)
    assert "benchmark mbpp" in text and "['7']" in text and "examples.mbpp" in text and "mbpp/1" in text


def _pairs(root: Path, model: str, bench: str, tokens: list[int | None], budget: int) -> None:
    folder = root / "pairs" / f"model={model}" / f"benchmark={bench}"
    folder.mkdir(parents=True)
    settings = json.dumps({"max_new_tokens": budget})
    n = len(tokens)  # the key columns every pairs file has (a file without them is foreign: skipped)
    pq.write_table(pa.table({"run_id": ["r1"] * n, "cell_id": [f"{model}/{bench}"] * n,
                             "example_id": [f"e{i}" for i in range(n)], "model": [model] * n,
                             "benchmark": [bench] * n, "base_answer_tokens": tokens,
                             "cell_settings": [settings] * n}),
                   folder / "s.parquet")


def test_budget_line_counts_answers_shorter_than_their_cells_budget(tmp_path: Path) -> None:
    _pairs(tmp_path, "smollm2", "mbpp", [10, 64, None, 63], budget=64)  # None: an error row, not counted
    _pairs(tmp_path, "smollm2", "chat", [100, 192], budget=192)
    _pairs(tmp_path, "other", "mbpp", [1, 1, 1], budget=64)  # a model outside the grid
    grid = grid_config("local", [f"results_dir={tmp_path}", "benchmarks=[mbpp,chat]"])
    early, rows = 2 + 1, 3 + 2  # below the budget: 10, 63 (mbpp) and 100 (chat)
    assert budget_line(grid) == (f"base answers ending before the answer budget (EOS): {early} of {rows} rows "
                                 f"({early / rows:.0%})")
