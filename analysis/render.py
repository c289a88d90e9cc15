"""Markdown rendering of analysis tables: column formats, row labels, one table → text.

Formats: ``pct`` a value already in percent (1 decimal), ``share`` a fraction shown in percent,
``x`` a speedup or ratio (2 decimals), ``prob`` a probability (3 decimals), ``num`` a count or median count (integers without decimals),
``text`` as is. A NULL renders as an en dash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from streamgen.acceptance_rules import column_label
from streamgen.config import METRICS

SCOPE_LABEL = {"macro": "average (macro)", "pooled": "pooled"}


@dataclass(frozen=True)
class Column:
    """One rendered column: source column name (or a derived one), header, format."""

    name: str
    header: str
    fmt: str = "text"


def fmt(value: object, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "pct":
        return f"{float(value):.1f}"  # type: ignore[arg-type]
    if kind == "share":
        return f"{100 * float(value):.1f}%"  # type: ignore[arg-type]
    if kind == "x":
        return f"{float(value):.2f}"  # type: ignore[arg-type]
    if kind == "prob":
        return f"{float(value):.3f}"  # type: ignore[arg-type]
    if kind == "num":
        v = float(value)  # type: ignore[arg-type]
        return f"{v:.0f}" if v.is_integer() else f"{v:.1f}"
    return str(value)


def setting_label(row: Mapping[str, Any], *, with_rule: bool = True) -> str:
    """THE label of a cell's setting, for tables, figures, the viewer and the simulation alike: model,
    the acceptance rule as the report's tables spell it (``streamgen.acceptance_rules.column_label``:
    greedy, τ=0.9, any other rule by its name with its τ if any), variant, verifier mode, tie guard,
    and the settings tag when one cell name holds several fingerprints. ``with_rule=False`` leaves the
    rule out (a figure's panel across rules). '' for a row without a model (an aggregate row)."""
    if "model" not in row:
        return ""
    parts = [str(row["model"])]
    if with_rule and (rule := column_label(row.get("acceptance") or "", row.get("tau"), table=True)):
        parts.append(rule)
    parts += [str(row[k]) for k in ("variant", "verifier_mode") if row.get(k)]
    if row.get("tie_guard") is not None:
        parts.append(f"guard={row['tie_guard']:g}")
    if row.get("settings_tag"):  # one of several fingerprints of this cell name: what differs
        parts.append(f"[{row['settings_tag']}]")
    return " · ".join(parts)


def row_label(row: dict) -> str:
    """The benchmark name, or 'average (macro)' / 'pooled' for aggregate rows. A benchmark whose quality
    is not one of the project's own metrics (an lm-eval task's, e.g. ``exact_match,strict-match``) is
    named with it: ``lm_eval:gsm8k (exact_match,strict-match)``."""
    label = SCOPE_LABEL.get(row.get("scope") or "", row.get("benchmark") or "–")
    metric = row.get("quality_metric")
    return f"{label} ({metric})" if metric and metric not in METRICS and row.get("scope") != "pooled" else label


def with_labels(rows: Sequence[dict]) -> list[dict]:
    """Rows with derived ``setting`` and ``row`` columns added."""
    return [{**r, "setting": setting_label(r), "row": row_label(r)} for r in rows]


def markdown(rows: Sequence[dict] | pa.Table, columns: Sequence[Column], *, blank_repeats: str = "") -> str:
    """A GitHub markdown table. ``blank_repeats`` names a column whose repeated values are blanked
    (like the paper's Table 2, where the model appears once per block)."""
    data = with_labels(rows.to_pylist() if isinstance(rows, pa.Table) else rows)
    if not data:
        return "_(no rows)_\n"
    lines = [
        "| " + " | ".join(c.header for c in columns) + " |",
        "|" + "|".join(" ---: " if c.fmt != "text" else " --- " for c in columns) + "|",
    ]
    previous = None
    for r in data:
        cells = [fmt(r.get(c.name), c.fmt) for c in columns]
        if blank_repeats:
            i = [c.name for c in columns].index(blank_repeats)
            current, cells[i] = cells[i], ("" if cells[i] == previous else cells[i])
            previous = current
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
