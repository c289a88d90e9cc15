"""analysis: DuckDB SQL over the result files: the paper's tables and figures, the nightly comparison, the
probe's table. Imports no Ray and nothing of jobs/ or workflows/; of streamgen/ only results/, the config,
the torch-free timing/ and acceptance_rules (rescore.py also the benchmarks' scorers): docs/design.md, "Layers".

The public entry points, the only names workflows/ import (tests/repo/test_import_direction.py checks it):

    print_summary(results_dir)              the grid's closing tables (report.py)
    write_report(results_dir, ...)          report.md, one CSV per table, the figures (report.py)
    budget_line(results_dir, models, benchmarks)   base answers ending before the answer budget
                                            (answer_budget.py, sql/answer_budget.sql); budget_count: the counts
    adaptation_summary(results_dir)         Table 3 and its paired intervals as markdown (adaptation_report.py)
    curve_figure(rows, path, title=...)     an adaptation's training curve as a PNG (training_curve.py)
    regression_check(baseline, run_dir, code_version=...)   the nightly comparison: passed + markdown report
    baseline_from_runs(run_dirs, ...), read_baseline, write_baseline, BaselineError   the nightly baseline
    write_probe_report(results_dir)         the §6.5 probe's probe.md / probe.csv (probe_report.py)

Each is imported on first use (``analysis.X`` loads only its module), so ``python -m analysis.view`` does not
load the report's figures. Commands: ``python -m analysis.<report | rescore | view | compact | simulate |
probe_report> DIR`` (README, "Everyday commands"; docs/analysis.md).

Modules:

    sql/                  one SQL file per table (docs/analysis.md names each); _cells/_dedup: each (cell
                          fingerprint, example) once; _views: the row-level pair_rows; _steps: included steps
    tables.py             runs the SQL files over a results directory (views pairs / steps / runs)
    sql_template.py       the SQL files' placeholders: the setting key written out from one tuple, the per-pair columns
    fingerprints.py       which fingerprints a report uses (--latest) and the label of what differs between them
    render.py             tables → markdown
    table_specs.py        which columns each report table shows, with heading and format
    report_sections.py    the report's markdown sections in order, each table with its heading and definitions
    report.py             python -m analysis.report DIR [--compare DIR2] [--latest] [--typing ...] [--keylog FILE]
    __main__.py           python -m analysis DIR: the same as python -m analysis.report
    figures.py            per-example speedup histograms (Fig 1 per benchmark, Fig 2 per model), quality vs speedup
    figure_pool.py        the report's figures as jobs, drawn in a process per core while later tables are built
    answer_budget.py      base answers ending before their answer budget (answer_budget.sql): the grid's closing line
    adaptation_report.py  Table 3 (adaptation.sql) and its paired intervals (adaptation_ci.sql) as printed text
    training_curve.py     an adaptation run's curve.jsonl as a figure: loss and held-out draft agreement vs steps
    regression.py         the nightly comparison: exact forwards, gated quality/speedup (regression_*.sql), markdown
    probe_report.py       python -m analysis.probe_report DIR: the §6.5 probe table (probe.md, probe.csv)
    typing_table.py       the typing table: every example × typing rate × policy, cost models per model/device
    post_hoc.py           the post-hoc policy evaluation over arrays, equal to evaluate per example
    timing_figures.py     wait vs typing rate; p95 wait vs number of users; CDF of waits over a typist population
    population.py         waits over a typist population: every example × sampled user × policy (population.sql)
    simulate.py           python -m analysis.simulate DIR: K users on one replica, seeded discrete events
    compact.py            python -m analysis.compact DIR: merge a results directory's per-shard files
    rescore.py            python -m analysis.rescore DIR: stored answers re-scored by today's scorers → scores/ rows
    view.py               python -m analysis.view DIR: the static results viewer (one cell-NNNN.js per cell)
    viewer/               the viewer page: index.html + viewer.js (plain HTML and JS, opens from file://)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

ENTRY_POINTS: dict[str, str] = {
    "print_summary": "analysis.report",
    "write_report": "analysis.report",
    "budget_line": "analysis.answer_budget",
    "budget_count": "analysis.answer_budget",
    "adaptation_summary": "analysis.adaptation_report",
    "curve_figure": "analysis.training_curve",
    "regression_check": "analysis.regression",
    "baseline_from_runs": "analysis.regression",
    "read_baseline": "analysis.regression",
    "write_baseline": "analysis.regression",
    "BaselineError": "analysis.regression",
    "write_probe_report": "analysis.probe_report",
}
"""Each public name → the module that defines it."""

__all__ = ["BaselineError", "adaptation_summary", "baseline_from_runs", "budget_count", "budget_line",
           "curve_figure", "print_summary", "read_baseline", "regression_check", "write_baseline",
           "write_probe_report", "write_report"]  # = ENTRY_POINTS' names (a test checks it)

if TYPE_CHECKING:
    from analysis.adaptation_report import adaptation_summary
    from analysis.answer_budget import budget_count, budget_line
    from analysis.probe_report import write_probe_report
    from analysis.regression import (
        BaselineError,
        baseline_from_runs,
        read_baseline,
        regression_check,
        write_baseline,
    )
    from analysis.report import print_summary, write_report
    from analysis.training_curve import curve_figure


def __getattr__(name: str) -> Any:
    """An entry point, imported from its module on first use; any other name is not analysis' to give."""
    module = ENTRY_POINTS.get(name)
    if module is None:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
