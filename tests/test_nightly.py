"""The nightly regression check: comparison logic (fast) and the real nightly grid (integration).

The integration tests run ``workflows/nightly.py`` in a subprocess, once as is (must pass against the
committed baseline) and once with the TEST-ONLY off-by-one acceptance of tests/perturb/sitecustomize.py
(must fail and name the moved cells).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import regression
from streamgen.config import REPO_ROOT, grid_config, to_yaml


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


def _baseline(runs: list[list[dict]]) -> dict:
    return regression.build_baseline([regression.summarise(r) for r in runs], grid_yaml="", code_version="t")


def test_identical_run_passes_and_wall_clock_is_not_gated() -> None:
    baseline = _baseline([_rows()])
    slower = [{**r, "base_wall_s": r["base_wall_s"] * 3, "residual_wall_s": r["residual_wall_s"] * 5} for r in _rows()]
    cmp = regression.compare(baseline, regression.summarise(slower))
    assert cmp.passed and cmp.moved_cells == []
    row = cmp.cells["tiny-llama / humaneval / greedy"]
    assert row["median_base_wall_s_ratio"] == pytest.approx(3.0)
    assert row["median_wall_speedup_ratio"] == pytest.approx(0.6)


def test_one_forward_more_moves_exactly_that_cell_and_the_report_names_it() -> None:
    baseline = _baseline([_rows()])
    now = _rows()
    now[0] = {**now[0], "residual_forwards": 21, "accepted_tokens_final": 3}
    cmp = regression.compare(baseline, regression.summarise(now))
    assert cmp.moved_cells == ["tiny-llama / humaneval / greedy"]
    whats = {m.what for m in cmp.moves}
    assert {"residual_forwards of HumanEval/0", "accepted_tokens_final of HumanEval/0"} <= whats
    assert "median_forward_speedup" in whats  # 24/20 and 1 -> 24/21 and 1
    report = regression.render_markdown(cmp, baseline, results_dir="r", code_version="c")
    assert report.startswith("# Nightly regression report: FAIL: 1 cell(s) moved")
    assert "| tiny-llama / humaneval / greedy | residual_forwards of HumanEval/0 | 20 | 21 | exact |" in report
    assert "| tiny-llama / mbpp / greedy | 1 |" in report and "| ok |" in report


def test_quality_tolerance_comes_from_the_spread_of_the_baseline_runs() -> None:
    noisy = [{**r, "stream_quality": 0.9} if r["example_id"] == "mbpp/1" else r for r in _rows()]
    baseline = _baseline([_rows(), noisy])  # spread 0.1 on mbpp stream quality -> tolerance 0.3
    gated = baseline["cells"]["tiny-llama / mbpp / greedy"]["gated"]["stream_quality"]
    assert gated["spread"] == pytest.approx(0.1) and gated["tolerance"] == pytest.approx(0.3)
    within = [{**r, "stream_quality": 0.75} if r["example_id"] == "mbpp/1" else r for r in _rows()]
    assert regression.compare(baseline, regression.summarise(within)).passed
    beyond = [{**r, "stream_quality": 0.6} if r["example_id"] == "mbpp/1" else r for r in _rows()]
    assert regression.compare(baseline, regression.summarise(beyond)).moved_cells == ["tiny-llama / mbpp / greedy"]
    # no spread: the floor (any real move fails)
    exact = _baseline([_rows()])["cells"]["tiny-llama / humaneval / greedy"]["gated"]["base_quality"]
    assert exact["tolerance"] == regression.DEFAULT_FLOORS["base_quality"]


def test_nondeterministic_forward_counts_refuse_a_baseline() -> None:
    other = _rows()
    other[1] = {**other[1], "speculative_forwards": 47}
    with pytest.raises(regression.BaselineError, match="not deterministic"):
        _baseline([_rows(), other])


def test_changed_example_set_and_duplicates_are_reported() -> None:
    baseline = _baseline([_rows()])
    cmp = regression.compare(baseline, regression.summarise(_rows()[:-1] + [_row("HumanEval/9")]))
    assert "tiny-llama / humaneval / greedy" in cmp.moved_cells
    assert any(m.now == "new (changed grid)" for m in cmp.moves)
    assert any(m.now.startswith("missing") for m in cmp.moves)
    with pytest.raises(regression.BaselineError, match="appears twice"):
        regression.summarise(_rows() + [_row("HumanEval/0")])


def test_a_run_that_produced_nothing_fails_naming_every_cell(tmp_path: Path) -> None:
    baseline = _baseline([_rows()])
    cmp = regression.compare(baseline, regression.summarise(regression.load_pairs(tmp_path)))
    assert not cmp.passed and len(cmp.moved_cells) == 3
    with pytest.raises(regression.BaselineError, match="cannot be a baseline"):
        _baseline([[]])


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
# The real nightly grid (a couple of minutes each on 2 cores)
# --------------------------------------------------------------------------------------------


def _nightly(tmp_path: Path, env_extra: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    report = tmp_path / "report.md"
    env = {**os.environ, **env_extra, "HOME": str(tmp_path)}  # Ray's bootstrap file goes to a temp HOME
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "workflows" / "nightly.py"),
                           f"results_dir={tmp_path / 'runs'}", "--report", str(report)],
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
    perturb = str(REPO_ROOT / "tests" / "perturb")
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
