"""analysis.adaptation_summary (analysis/adaptation_report.py): the text workflows/adapt.py prints under
"Table 3 — ..." is the one it assembled itself before issue 53, character for character.

The reference below is the old ``evaluate``'s printing, kept as it was, captured from stdout; both run on
synthetic plain/adapted pairs rows: with paired examples (Table 3 and the paired intervals), and with a
variant whose plain model is absent (no matched cells).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from analysis import adaptation_summary
from analysis.render import markdown
from analysis.report_sections import adaptation_ci_rows
from analysis.table_specs import ADAPT, ADAPT_CI
from analysis.tables import build_tables
from tests.support.analysis_fixtures import RecordSet, pair_record, write_record_set


def old_printing(results_dir: Path) -> str:
    """workflows/adapt.py's evaluate() after the grid, before issue 53 (the title line aside)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tables = build_tables(results_dir, ["adaptation", "adaptation_ci"])
        table, ci = tables["adaptation"], tables["adaptation_ci"]
        print(markdown(table, ADAPT, blank_repeats="setting") if table.num_rows else "(no matched cells)")
        if ci.num_rows:
            print("\nPaired over examples included on both sides; Δ = adapted − plain with its 95 % bootstrap "
                  "interval (1000 resamples)\n")
            print(markdown(adaptation_ci_rows(ci), ADAPT_CI, blank_repeats="setting"))
    return out.getvalue()


def _pairs(variant: str | None, residual: int, n: int = 6) -> list:
    """An adapted model's rows carry the plain model's name and their variant (ModelConfig.base_model)."""
    return [pair_record(model="m", benchmark="mbpp", variant=variant, cell_id=f"m|mbpp|{variant}",
                        example_id=f"e{i}", residual_forwards=residual + i % 2) for i in range(n)]


@pytest.mark.parametrize("plain", [True, False], ids=["paired", "no-plain-model"])
def test_the_summary_prints_what_adapt_printed(tmp_path: Path, plain: bool) -> None:
    pairs = _pairs("lora", 2) + (_pairs(None, 5) if plain else [])
    root = write_record_set(tmp_path, RecordSet(pairs, []), with_steps=False, with_runs=False)
    text = adaptation_summary(root)
    assert text + "\n" == old_printing(root)
    assert ("Paired over examples" in text) == plain and ("(no matched cells)" in text) == (not plain)
