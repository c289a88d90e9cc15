"""The results viewer's data files (analysis/view.py) against the rows they come from.

The reference here reads the Parquet files with pyarrow and classifies each row by hand (kept whole /
nothing / part at the final step, stream ≠ base, errors, excluded), so a wrong join, a dropped or
doubled example, a step out of order or a mislabelled filter count shows as a difference.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from analysis.view import STEP_COLUMNS, main, read_js, write_viewer
from streamgen.models.scripted import SCRIPTS
from tests.support.analysis_fixtures import record_sets, write_record_set
from tests.support.view_support import ERROR_EXAMPLE, scripted_results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_results(tmp_path_factory.mktemp("view") / "results")


def _rows(root: Path, table: str) -> list[dict[str, Any]]:
    return [r for f in sorted((root / table).rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def _kept(p: dict[str, Any]) -> str | None:
    if p["error_type"] is not None or p["excluded_reason"] is not None:
        return None
    draft, accepted = p["draft_tokens_final"], p["accepted_tokens_final"]
    return "no_draft" if draft == 0 else "none" if accepted == 0 else "all" if accepted >= draft else "part"


def _reference(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(cell id, example id) → what the page must show: the pair's columns, kept class, steps in order."""
    steps: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in _rows(root, "steps"):
        steps.setdefault((s["cell_id"], s["example_id"]), []).append(s)
    out = {}
    for p in _rows(root, "pairs"):
        key = (p["cell_id"], p["example_id"])
        included = p["error_type"] is None and p["excluded_reason"] is None
        out[key] = {**p, "kept": _kept(p), "answer_changed": (p["base_answer"] != p["stream_answer"]) if included else None,
                    "steps": [[s[c] for c in STEP_COLUMNS] for s in sorted(steps.get(key, []), key=lambda s: s["step"])]}
    return out


def _written(out: Path) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    index = read_js(out / "data" / "cells.js")
    shown = {}
    for cell in index["cells"]:
        data = read_js(out / "data" / f"{cell['name']}.js")
        assert data["name"] == cell["name"] and len(data["examples"]) == cell["counts"]["n"]
        for ex in data["examples"]:
            key = (cell["cell_id"], ex["example_id"])
            assert key not in shown, f"{key} shown twice"
            shown[key] = ex
    return index, shown


def _check(root: Path, out: Path) -> dict[str, Any]:
    index, shown = _written(out)
    expected = _reference(root)
    assert shown.keys() == expected.keys()
    for key, ex in shown.items():
        want = expected[key]
        assert ex["steps"] == want["steps"], key
        for column in ex.keys() - {"steps", "s_fwd", "s_wall"}:
            assert ex[column] == want[column], (key, column)
    for cell in index["cells"]:
        mine = [v for (c, _), v in expected.items() if c == cell["cell_id"]]
        counts = {k: sum(v["kept"] == k for v in mine) for k in ("all", "none", "part", "no_draft")}
        counts |= {"n": len(mine), "changed": sum(bool(v["answer_changed"]) for v in mine),
                   "error": sum(v["error_type"] is not None for v in mine),
                   "excluded": sum(v["error_type"] is None and v["excluded_reason"] is not None for v in mine)}
        assert cell["counts"] == counts, cell["label"]
    return index


def test_scripted_grid_every_example_and_step_as_the_rows_hold_them(results: Path, tmp_path: Path) -> None:
    viewer = write_viewer(results, tmp_path / "viewer", threads=1)
    index = _check(results, tmp_path / "viewer")
    assert viewer.page.read_text().count("viewer.js") == 1 and (tmp_path / "viewer" / "viewer.js").exists()
    by_model = {c["model"]: c for c in index["cells"]}
    # by design: constant keeps every draft whole, lastsegment nothing, prefix exactly k (a part)
    assert by_model["scripted-ar-constant"]["counts"]["all"] == 3
    assert by_model["scripted-ar-lastsegment"]["counts"]["none"] == 3
    assert by_model["scripted-ar-prefix"]["counts"]["part"] == 3 and by_model["scripted-ar-prefix"]["counts"]["error"] == 1
    assert index["step_columns"] == list(STEP_COLUMNS) and viewer.n_pairs == 10
    prefix = read_js(tmp_path / "viewer" / "data" / f"{by_model['scripted-ar-prefix']['name']}.js")["examples"]
    final = [dict(zip(STEP_COLUMNS, ex["steps"][-1], strict=True)) for ex in prefix if ex["steps"]]
    assert {s["accepted_tokens"] for s in final} == {SCRIPTS["prefix"].k}
    assert all(s["draft_kept_text"] and s["draft_thrown_text"] for s in final)  # the spans the page marks
    (error,) = [ex for ex in prefix if ex["example_id"] == ERROR_EXAMPLE]
    assert error["steps"] == [] and "verifier crashed" in error["error_traceback"]


def test_an_older_run_of_the_same_cell_and_example_is_shown_once_from_the_newest(results: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    shutil.copytree(results, root)
    old = next((root / "pairs").glob("*/*.parquet"))
    table = pq.read_table(old)
    rows = [{**r, "run_id": "run-0", "stream_answer": "OLD"} for r in table.to_pylist()]
    pq.write_table(table.from_pylist(rows, schema=table.schema), root / "pairs" / "older.parquet")
    write_viewer(root, tmp_path / "viewer", threads=1)
    _, shown = _written(tmp_path / "viewer")
    assert len(shown) == 10 and {ex["run_id"] for ex in shown.values()} == {"run-1"}
    assert "OLD" not in {ex["stream_answer"] for ex in shown.values()}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=record_sets(max_rows=25))
def test_generated_record_sets_with_excluded_and_error_rows(records, tmp_path_factory) -> None:
    root = write_record_set(tmp_path_factory.mktemp("rs"), records)
    write_viewer(root, root / "viewer", threads=1)
    _check(root, root / "viewer")


def test_a_directory_without_results_is_one_message(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no result files" in capsys.readouterr().err
