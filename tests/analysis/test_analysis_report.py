"""The report: markdown, one CSV per table, figures read back, the CLI with --compare, print_summary."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pytest
from matplotlib.image import imread

from analysis.report import print_summary, write_report
from analysis.tables import TABLES, build_tables, compare_tables
from analysis.typing_table import build_typing
from tests.support.analysis_fixtures import RecordSet, pair_record, write_record_set
from tests.support.synthetic import SyntheticSpec, write_synthetic_results

REPO = Path(__file__).resolve().parents[2]
SPEC = SyntheticSpec(
    models=("refusion-8b",),
    benchmarks=("humaneval", "mbpp", "chat"),
    settings=(("greedy", None), ("threshold", 0.5)),
    variants=(None, "lora-1000"),
    examples_per_cell=30,
    files_per_cell=2,
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("results")
    write_synthetic_results(root, SPEC)
    return root


@pytest.fixture(scope="module")
def report(run_dir: Path):
    return write_report(run_dir, threads=1)


def test_report_has_every_section_and_one_csv_per_table(report, run_dir: Path) -> None:
    text = report.markdown_path.read_text()
    for heading in (
        "Table 1",
        "Table 2",
        "Distribution of the gain",
        "Draft kept",
        "Attainable limit",
        "Excluded and error rows",
        "Adaptation before → after",
        "Table 3 with paired 95 % intervals",
        "τ sweep",
        "Steps of the stream",
        "Share of the attainable speedup",
        "Per-model speedup, pooled over benchmarks (Figure 2)",
        "Speed against correctness",
        "Drafts that did not change",
        "accept ratio before",
        "## Figures",
        "synthetic-run",
    ):
        assert heading in text, heading
    assert "average (macro)" in text and "pooled" in text
    tables = build_tables(run_dir, threads=1)
    typing = build_typing(run_dir, threads=1)
    tables.update({"typing": typing.summary, "cost_models": typing.cost_models})
    assert sorted(p.name for p in report.csv_paths) == sorted(f"{n}.csv" for n in (*TABLES, "typing", "cost_models"))
    for path in report.csv_paths:
        assert pacsv.read_csv(path).num_rows == tables[path.stem].num_rows, path.name
    assert tables["cells"].num_rows > 0 and tables["adaptation"].num_rows > 0
    for fig in report.figure_paths:
        assert f"]({fig.name})" in text


def test_figures_are_written_and_show_data(report) -> None:
    by_model = [p for p in report.figure_paths if p.name.startswith("speedup-by-model-")]
    speed = [p for p in report.figure_paths if p.name.startswith("speedup-") and p not in by_model]
    sweep = [p for p in report.figure_paths if p.name.startswith("tau-sweep-")]
    assert len(speed) == 2 * 2  # settings × variants (one model)
    assert len(by_model) == 2  # Figure 2: one per acceptance setting, a panel per model (and variant)
    assert len(sweep) == 2  # variants
    for path in report.figure_paths:
        img = imread(path)[..., :3]
        assert img.shape[0] > 300 and img.shape[1] > 500, path.name
        non_white = (img < 0.9).any(axis=-1).mean()
        assert non_white > 0.03, (path.name, non_white)
        assert img.std() > 0.05
    # the median line is drawn in a fixed red, the histogram bars in blue: both must be present
    img = imread(speed[0])[..., :3]
    assert _share_near(img, (0xC4, 0x4E, 0x52)) > 1e-4
    assert _share_near(img, (0x4C, 0x72, 0xB0)) > 1e-3


def _share_near(img: np.ndarray, rgb: tuple[int, int, int], tol: float = 0.08) -> float:
    return float((np.abs(img - np.asarray(rgb) / 255).max(axis=-1) < tol).mean())


def test_print_summary_writes_and_returns_the_main_tables(run_dir: Path) -> None:
    out = io.StringIO()
    text = print_summary(run_dir, file=out)
    assert out.getvalue().strip() == text.strip()
    assert "Table 2 layout" in text and "average (macro)" in text and "pooled" in text
    assert "refusion-8b · greedy" in text and "refusion-8b · τ=0.5 · lora-1000" in text


def test_quality_is_shown_in_percent(tmp_path: Path) -> None:
    rows = [
        pair_record(example_id=f"e{i}", base_quality=q, stream_quality=q) for i, q in enumerate([0.5, 1.0])
    ]
    write_record_set(tmp_path, RecordSet(rows, []), with_steps=False, with_runs=False)
    text = write_report(tmp_path, threads=1, with_figures=False).markdown_path.read_text()
    assert "| m-ar · greedy | humaneval | 2 | 75.0 | 75.0 |" in text
    assert "Steps of the stream" not in text  # no steps files: the section is left out


def test_cli_compare_shows_deltas(run_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    write_synthetic_results(other, SyntheticSpec(**{**SPEC.__dict__, "seed": 7, "variants": (None,)}))
    proc = _cli(
        str(run_dir),
        "--compare",
        str(other),
        "--out",
        str(tmp_path / "rep"),
        "--threads",
        "1",
        "--no-figures",
    )
    assert proc.returncode == 0, proc.stderr
    assert "Comparison" in proc.stdout and "Quality and residual speedup" in proc.stdout
    rows = pacsv.read_csv(tmp_path / "rep" / "compare.csv").to_pylist()
    both = [r for r in rows if r["n_included_a"] is not None and r["n_included_b"] is not None]
    assert both and any(r["n_included_b"] is None for r in rows)  # lora rows exist only in A
    for r in both:
        assert r["stream_quality_pct_delta"] == pytest.approx(
            r["stream_quality_pct_b"] - r["stream_quality_pct_a"]
        )


def test_compare_with_itself_gives_zero_deltas(run_dir: Path) -> None:
    rows = compare_tables(run_dir, run_dir, threads=1).to_pylist()
    deltas = [v for r in rows for k, v in r.items() if k.endswith("_delta") and v is not None]
    assert deltas and all(d == 0 for d in deltas)
    assert all(r["n_included_a"] == r["n_included_b"] for r in rows)


def test_cli_without_results_says_how_to_fix(tmp_path: Path) -> None:
    proc = _cli(str(tmp_path / "nothing"))
    assert proc.returncode == 2
    assert "full_grid.py" in proc.stderr


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "analysis.report", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_print_summary_without_results_says_so(tmp_path: Path) -> None:
    out = io.StringIO()
    text = print_summary(tmp_path / "empty", file=out)
    assert text.startswith("no tables:") and "full_grid.py" in out.getvalue()


def test_run_list_shows_how_each_run_ended(tmp_path: Path) -> None:
    import dataclasses

    import pyarrow.parquet as pq

    from streamgen.results.records import RunRecord, to_table
    from tests.support.analysis_fixtures import run_record

    write_record_set(tmp_path, RecordSet([pair_record()], []), with_steps=False, with_runs=False)
    runs = [dataclasses.replace(run_record("run-1"), status="interrupted", stop_signal="SIGTERM"),
            dataclasses.replace(run_record("run-2"), status="finished"), run_record("run-0")]
    (tmp_path / "runs").mkdir()
    for r in runs:
        pq.write_table(to_table([r], RunRecord), tmp_path / "runs" / f"{r.run_id}.parquet")
    got = {r["run_id"]: r["status"] for r in build_tables(tmp_path, ["run_list"], threads=1)["run_list"].to_pylist()}
    assert got == {"run-0": None, "run-1": "interrupted (SIGTERM)", "run-2": "finished"}


def test_one_setting_label_for_every_rule_and_field() -> None:
    """Tables, figures, the viewer and the simulation share ``analysis.render.setting_label``: a rule
    other than greedy/threshold is named (before, the report labelled it "greedy" and two rules of one
    model gave two identical rows), and every field that splits a cell appears."""
    from analysis.render import setting_label

    base = {"model": "m", "acceptance": "greedy", "tau": None}
    assert setting_label(base) == "m · greedy"
    assert setting_label({**base, "acceptance": "threshold", "tau": 0.9}) == "m · τ=0.9"
    assert setting_label({**base, "acceptance": "typical"}) == "m · typical"
    assert setting_label({**base, "acceptance": "typical", "tau": 0.3}) == "m · typical τ=0.3"
    assert setting_label({**base, "variant": "adapted", "verifier_mode": "hidden", "tie_guard": 2.0,
                          "settings_tag": "max_new_tokens=8"}) == "m · greedy · adapted · hidden · guard=2 · [max_new_tokens=8]"
    assert setting_label({"benchmark": "mbpp"}) == ""  # an aggregate row has no setting
    labels = {setting_label({**base, "acceptance": a}) for a in ("greedy", "typical", "eagle")}
    assert len(labels) == 3
