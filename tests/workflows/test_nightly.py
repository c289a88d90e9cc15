"""The nightly regression check: comparison logic (fast) and the real nightly grid (integration).

The integration tests run ``workflows/nightly.py`` in a subprocess, once as is (must pass against the
committed baseline) and once with the TEST-ONLY off-by-one acceptance of tests/support/perturb/sitecustomize.py
(must fail and name the moved cells).
"""

from __future__ import annotations

import copy
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import regression, tables
from streamgen.config import REPO_ROOT, grid_config, to_yaml
from tests.support.analysis_fixtures import RecordSet, pair_record, write_record_set


def _row(example: str, *, bench: str = "humaneval", acceptance: str = "greedy", tau: float | None = None,
         base_f: int = 24, resid_f: int = 20, bq: float = 0.0, sq: float = 0.0, wall: float = 0.1) -> dict:
    return {"model": "tiny-llama", "benchmark": bench, "acceptance": acceptance, "tau": tau,
            "verifier_mode": None, "example_id": example, "base_forwards": base_f, "residual_forwards": resid_f,
            "speculative_forwards": 48, "draft_tokens_final": 24, "accepted_tokens_final": base_f - resid_f,
            "base_answer_tokens": 24, "stream_answer_tokens": 24, "excluded_reason": None, "error_type": None,
            "base_quality": bq, "stream_quality": sq, "base_wall_s": wall, "residual_wall_s": wall / 2}


def _rows() -> list[dict]:
    return [_row("HumanEval/0"), _row("HumanEval/1", resid_f=24), _row("mbpp/1", bench="mbpp", bq=1.0, sq=1.0),
            _row("HumanEval/0", acceptance="threshold", tau=0.5, resid_f=24)]


def _write(rows: list[dict], root: Path) -> Path:
    """The rows as a fresh results directory under ``root`` (one cell id per model/benchmark/setting)."""
    out = root / f"run{sum(1 for _ in root.glob('run*'))}"
    pairs = [pair_record(**r, cell_id=f"{r['model']}|{r['benchmark']}|{r['acceptance']}|{r['tau']}|{r.get('variant')}")
             for r in rows]
    return write_record_set(out, RecordSet(pairs, []), with_steps=False)


def _summary(rows: list[dict], root: Path) -> regression.RunSummary:
    return regression.summarise(_write(rows, root))


def _baseline(runs: list[list[dict]], root: Path) -> dict:
    return regression.build_baseline([_summary(r, root) for r in runs], grid_yaml="", code_version="t")


def test_identical_run_passes_and_wall_clock_is_not_gated(tmp_path: Path) -> None:
    baseline = _baseline([_rows()], tmp_path)
    slower = [{**r, "base_wall_s": r["base_wall_s"] * 3, "residual_wall_s": r["residual_wall_s"] * 5} for r in _rows()]
    cmp = regression.compare(baseline, _summary(slower, tmp_path))
    assert cmp.passed and cmp.moved_cells == []
    row = cmp.cells["tiny-llama / humaneval / greedy"]
    assert row["median_base_wall_s_ratio"] == pytest.approx(3.0)
    assert row["median_wall_speedup_ratio"] == pytest.approx(0.6)


def test_one_forward_more_moves_exactly_that_cell_and_the_report_names_it(tmp_path: Path) -> None:
    baseline = _baseline([_rows()], tmp_path)
    now = _rows()
    now[0] = {**now[0], "residual_forwards": 21, "accepted_tokens_final": 3}
    cmp = regression.compare(baseline, _summary(now, tmp_path))
    assert cmp.moved_cells == ["tiny-llama / humaneval / greedy"]
    whats = {m.what for m in cmp.moves}
    assert {"residual_forwards of HumanEval/0", "accepted_tokens_final of HumanEval/0"} <= whats
    assert "median_forward_speedup" in whats  # 24/20 and 1 -> 24/21 and 1
    report = regression.render_markdown(cmp, baseline, results_dir="r", code_version="c")
    assert report.startswith("# Nightly regression report: FAIL: 1 cell(s) moved")
    assert "| tiny-llama / humaneval / greedy | residual_forwards of HumanEval/0 | 20 | 21 | exact |" in report
    assert "| tiny-llama / mbpp / greedy | 1 |" in report and "| ok |" in report


def test_the_nightlys_one_calls_equal_the_steps_they_stand_for(tmp_path: Path) -> None:
    """analysis.regression_check / baseline_from_runs (what workflows/nightly.py calls through analysis' face)
    give what summarise → compare → render_markdown and summarise → build_baseline give."""
    from analysis import baseline_from_runs, regression_check

    dirs = [_write(_rows(), tmp_path) for _ in range(2)]
    baseline = baseline_from_runs(iter(dirs), grid_yaml="", code_version="t")
    baseline_by_steps = regression.build_baseline([regression.summarise(d) for d in dirs], grid_yaml="", code_version="t")
    assert {k: v for k, v in baseline.items() if k != "created_at"} == \
        {k: v for k, v in baseline_by_steps.items() if k != "created_at"}
    now = _rows()
    now[0] = {**now[0], "residual_forwards": 21}
    run = _write(now, tmp_path)
    passed, report = regression_check(baseline, run, code_version="c")
    cmp = regression.compare(baseline, regression.summarise(run))
    assert (passed, report) == (cmp.passed, regression.render_markdown(cmp, baseline, results_dir=str(run),
                                                                        code_version="c"))
    assert not passed and "residual_forwards of HumanEval/0" in report


def test_quality_tolerance_comes_from_the_spread_of_the_baseline_runs(tmp_path: Path) -> None:
    noisy = [{**r, "stream_quality": 0.9} if r["example_id"] == "mbpp/1" else r for r in _rows()]
    baseline = _baseline([_rows(), noisy], tmp_path)  # spread 0.1 on mbpp stream quality -> tolerance 0.3
    gated = baseline["cells"]["tiny-llama / mbpp / greedy"]["gated"]["stream_quality"]
    assert gated["spread"] == pytest.approx(0.1) and gated["tolerance"] == pytest.approx(0.3)
    within = [{**r, "stream_quality": 0.75} if r["example_id"] == "mbpp/1" else r for r in _rows()]
    assert regression.compare(baseline, _summary(within, tmp_path)).passed
    beyond = [{**r, "stream_quality": 0.6} if r["example_id"] == "mbpp/1" else r for r in _rows()]
    assert regression.compare(baseline, _summary(beyond, tmp_path)).moved_cells == ["tiny-llama / mbpp / greedy"]
    # no spread: the floor (any real move fails)
    exact = _baseline([_rows()], tmp_path)["cells"]["tiny-llama / humaneval / greedy"]["gated"]["base_quality"]
    assert exact["tolerance"] == regression.DEFAULT_FLOORS["base_quality"]


def test_nondeterministic_forward_counts_refuse_a_baseline(tmp_path: Path) -> None:
    other = _rows()
    other[1] = {**other[1], "speculative_forwards": 47}
    with pytest.raises(regression.BaselineError, match="not deterministic"):
        _baseline([_rows(), other], tmp_path)


def test_changed_example_set_and_duplicates_are_reported(tmp_path: Path) -> None:
    baseline = _baseline([_rows()], tmp_path)
    cmp = regression.compare(baseline, _summary(_rows()[:-1] + [_row("HumanEval/9")], tmp_path))
    assert "tiny-llama / humaneval / greedy" in cmp.moved_cells
    assert any(m.now == "new (changed grid)" for m in cmp.moves)
    assert any(m.now.startswith("missing") for m in cmp.moves)
    with pytest.raises(regression.BaselineError, match="appears twice"):
        _summary(_rows() + [_row("HumanEval/0")], tmp_path)
    # another fingerprint (a variant) under the same cell name: two runs' settings mixed, not merged
    with pytest.raises(regression.BaselineError, match="two fingerprints"):
        _summary(_rows() + [{**_row("HumanEval/7"), "variant": "lora"}], tmp_path)


def test_a_run_that_produced_nothing_fails_naming_every_cell(tmp_path: Path) -> None:
    baseline = _baseline([_rows()], tmp_path)
    cmp = regression.compare(baseline, regression.summarise(tmp_path / "empty"))
    assert not cmp.passed and len(cmp.moved_cells) == 3
    with pytest.raises(regression.BaselineError, match="cannot be a baseline"):
        _baseline([[]], tmp_path)


def test_committed_baseline_was_made_from_the_current_nightly_grid() -> None:
    baseline = regression.read_baseline(REPO_ROOT / "baselines" / "nightly.json")
    assert baseline["grid_yaml"] == to_yaml(grid_config("nightly")), (
        "configs/grid/nightly.yaml changed: refresh the baseline deliberately "
        "(python workflows/nightly.py --update-baseline) and commit both")
    assert baseline["runs"] >= 2 and baseline["examples"]
    assert all(len(c["gated"]) == len(regression.GATED) for c in baseline["cells"].values())
    reread = copy.deepcopy(baseline)
    assert regression.compare(reread, regression.RunSummary(
        reread["examples"], {k: {**{m: v["value"] for m, v in c["gated"].items()}, **c["reported"], "n": c["n"]}
                             for k, c in reread["cells"].items()})).passed


# --------------------------------------------------------------------------------------------
# The statistics are the report's: one definition of "included" and of the speedups
# --------------------------------------------------------------------------------------------


def _view_rows() -> list[dict]:
    """One cell: three included examples, one excluded and one error, the last two with values that
    would move every statistic if they leaked into it."""
    poison = {"base_f": 10**6, "resid_f": 1, "bq": 1.0, "sq": 1.0}
    return [_row("HumanEval/0", resid_f=20, bq=0.0), _row("HumanEval/1", resid_f=8, bq=1.0),
            _row("HumanEval/2", resid_f=6, bq=1.0, sq=1.0),
            {**_row("HumanEval/3", **poison), "excluded_reason": "single_segment"},
            {**_row("HumanEval/4", **poison), "error_type": "RuntimeError"}]


def _expected(rows: list[dict], *, speedup_factor: float = 1.0) -> dict[str, float]:
    return {"n": float(len(rows)), "base_quality": statistics.mean(r["base_quality"] for r in rows),
            "stream_quality": statistics.mean(r["stream_quality"] for r in rows),
            "median_forward_speedup": speedup_factor * statistics.median(
                r["base_forwards"] / r["residual_forwards"] for r in rows)}


SQL_DIR = tables.SQL_DIR  # the real one, before any test points the runner elsewhere


def _broken_views(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of analysis/sql/ whose _views.sql has ``old`` replaced by ``new`` (exactly once)."""
    sql = shutil.copytree(SQL_DIR, tmp_path / "sql")
    text = (sql / "_views.sql").read_text()
    assert text.count(old) == 1, f"_views.sql no longer has one {old!r}: update this test"
    (sql / "_views.sql").write_text(text.replace(old, new))
    return sql


def test_nightly_statistics_are_the_report_views(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _view_rows()
    results = _write(rows, tmp_path)
    cell = "tiny-llama / humaneval / greedy"
    included = [r for r in rows if r["excluded_reason"] is None and r["error_type"] is None]
    assert regression.summarise(results).cells[cell] == pytest.approx(
        {**_expected(included), "median_wall_speedup": 2.0, "median_base_wall_s": 0.1})
    report = tables.build_tables(results, ["cells"])["cells"].to_pylist()
    (table1,) = [r for r in report if r["scope"] == "benchmark"]  # the report's Table 1, same cell
    assert table1["n_included"] == 3
    assert table1["median_speedup_forwards"] == pytest.approx(_expected(included)["median_forward_speedup"])
    # Break the view's definition of "included" (exclusions counted): the nightly numbers follow it.
    monkeypatch.setattr(tables, "SQL_DIR", _broken_views(
        tmp_path / "incl", "AS is_included", "OR excluded_reason IS NOT NULL AS is_included"))
    with_excluded = [r for r in rows if r["error_type"] is None]
    moved = regression.summarise(results).cells[cell]
    assert {m: moved[m] for m in _expected(rows)} == pytest.approx(_expected(with_excluded))
    # Break the view's forward speedup (doubled): the nightly's median doubles with it.
    monkeypatch.setattr(tables, "SQL_DIR", _broken_views(tmp_path / "fwd", "AS s_fwd", "* 2 AS s_fwd"))
    doubled = regression.summarise(results).cells[cell]
    assert doubled["median_forward_speedup"] == pytest.approx(2 * _expected(included)["median_forward_speedup"])
    assert doubled["n"] == 3.0


# --------------------------------------------------------------------------------------------
# The real nightly grid (a couple of minutes each on 2 cores)
# --------------------------------------------------------------------------------------------


def _nightly(tmp_path: Path, env_extra: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    report = tmp_path / "report.md"
    env = {**os.environ, **env_extra, "HOME": str(tmp_path)}  # Ray's bootstrap file goes to a temp HOME
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "workflows" / "nightly.py"),
                           f"results_dir={tmp_path / 'runs'}", "--report", str(report),
                           "--no-references"],  # the sweep stage: tests/streamgen/benchmarks/test_check.py
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False)
    return proc, report.read_text() if report.exists() else ""


@pytest.mark.integration
@pytest.mark.slow
def test_nightly_grid_passes_against_its_baseline(tmp_path: Path) -> None:
    proc, report = _nightly(tmp_path, {})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report.startswith("# Nightly regression report: PASS")
    assert "MOVED" not in report


@pytest.mark.integration
@pytest.mark.slow
def test_perturbed_acceptance_fails_and_names_the_moved_cells(tmp_path: Path) -> None:
    perturb = str(REPO_ROOT / "tests" / "support" / "perturb")
    pythonpath = os.pathsep.join(p for p in (perturb, os.environ.get("PYTHONPATH", "")) if p)
    proc, report = _nightly(tmp_path, {"PYTHONPATH": pythonpath, "STREAMGEN_TEST_PERTURB": "accept-off-by-one"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report.startswith("# Nightly regression report: FAIL")
    moved = {line.split(" | ")[0].lstrip("| ") for line in report.split("## Cells")[0].splitlines()
             if line.startswith("| tiny-")}
    # The drafts of the autoregressive greedy cells were partly accepted: one token more changes the
    # residual forward count of those examples (HumanEval/0 accepted 4 of 24 in the baseline).
    assert "tiny-llama / humaneval / greedy" in moved
    assert "residual_forwards of HumanEval/0" in report
    for cell in moved:
        assert f"| {cell} |" in report.split("## Cells")[1] and "MOVED" in report
