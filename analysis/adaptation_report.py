"""Table 3 of an adaptation's evaluation grid as ``workflows/adapt.py`` prints it: plain vs adapted per
setting (``adaptation.sql``), then, when examples are included on both sides, the paired differences with
their bootstrap intervals (``adaptation_ci.sql``). docs/adaptation.md defines the columns.
"""

from __future__ import annotations

from pathlib import Path

from analysis.render import markdown
from analysis.report_sections import adaptation_ci_rows
from analysis.table_specs import ADAPT, ADAPT_CI
from analysis.tables import build_tables

PAIRED = ("Paired over examples included on both sides; Δ = adapted − plain with its 95 % bootstrap "
          "interval (1000 resamples)")


def adaptation_summary(results_dir: str | Path) -> str:
    """Table 3 in markdown ("(no matched cells)" when no plain/adapted pair matched), and the paired table."""
    tables = build_tables(results_dir, ["adaptation", "adaptation_ci"])
    table, ci = tables["adaptation"], tables["adaptation_ci"]
    text = markdown(table, ADAPT, blank_repeats="setting") if table.num_rows else "(no matched cells)"
    if ci.num_rows:
        text += f"\n\n{PAIRED}\n\n" + markdown(adaptation_ci_rows(ci), ADAPT_CI, blank_repeats="setting")
    return text
