"""The report's sections: each table of ``build_tables`` laid out as markdown with its heading and
the text that defines it, in the report's order (``sections``), plus the notes that depend on the data
(several fingerprints of one cell, re-scored rows, adaptation intervals in long form).

The columns each table shows: ``analysis.table_specs``. Definitions of every statistic: docs/analysis.md.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from analysis.render import fmt, markdown, row_label, with_labels
from analysis.table_specs import (
    ADAPT,
    ADAPT_CI,
    ADAPT_CI_METRICS,
    ATTAIN,
    BY_MODEL,
    COMPARE,
    CROSS,
    DIVERGENCE,
    EXCLUSIONS,
    GAIN,
    KEPT,
    LIMIT,
    PRINTS,
    RESCORED,
    RUNS,
    STABLE,
    STEPS,
    SWEEP,
    TABLE2,
    table1,
)


def _rows(table: pa.Table, **where: object) -> list[dict]:
    rows = table.to_pylist()
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]



def main_tables(tables: dict[str, pa.Table]) -> str:
    """Table 2 (benchmark rows, macro average, pooled) and the pooled/macro gain summary."""
    gain = [r for r in tables["distribution"].to_pylist() if r["scope"] != "benchmark"]
    return (
        "### Quality and residual speedup (Table 2 layout)\n\n"
        + markdown(tables["models"], TABLE2, blank_repeats="setting")
        + "\n### Distribution of the gain (macro and pooled)\n\n"
        + markdown(gain, GAIN, blank_repeats="setting")
    )



def fingerprint_note(fingerprints: pa.Table) -> str | None:
    """The note at the top of the report when a cell name has several fingerprints, rows were written
    twice, or --latest dropped fingerprints; None when every cell has one meaning and no duplicates."""
    rows = fingerprints.to_pylist()
    split = sorted({r["setting"] + " / " + str(r["benchmark"]) for r in with_labels(rows)
                    if r["n_fingerprints"] > 1 and r["kept"]})
    dropped = [r for r in rows if not r["kept"]]
    duplicates = sum(r["n_duplicates"] for r in rows if r["kept"])
    if not (split or dropped or duplicates):
        return None
    lines = ["## Cells with several settings in this directory\n"]
    if split:
        lines.append(f"{len(split)} cell(s) appear under several fingerprints (different settings); each "
                     "is shown as its own row, labelled [by the settings that differ]. Pass `--latest` to "
                     "keep only the most recent run's. Cells: " + "; ".join(split) + ".")
    if dropped:
        lines.append(f"`--latest`: {len(dropped)} older fingerprint(s) left out "
                     f"({sum(r['n_rows'] for r in dropped)} rows).")
    if duplicates:
        lines.append(f"{duplicates} row(s) repeat a (cell, example) already written by another run: each "
                     "(cell, example) is counted once, from its most recent run.")
    used = [r for r in rows if r["kept"] or r["n_fingerprints"] > 1]
    return "\n\n".join(lines) + "\n\n" + markdown(used, PRINTS)


def _scorer_split(cells: pa.Table) -> list[str]:
    """The cells counted under several scorer versions (their rows' tags carry ``scorer <version>``)."""
    return sorted({r["setting"] for r in with_labels(cells.to_pylist()) if "scorer " in (r["settings_tag"] or "")})


def rescored_section(tables: dict[str, pa.Table]) -> str:
    """Which counted rows carry scores from ``python -m analysis.rescore``, and the cells whose rows
    mix scorer versions (shown as separate rows until a rescore brings them to one version)."""
    text = ("## Re-scored rows\n\nRows whose qualities come from `python -m analysis.rescore` (the newest "
            "re-score of each row) instead of the grid's own scoring.\n\n" + markdown(tables["rescored"], RESCORED))
    split = _scorer_split(tables["cells"])
    if split:
        text += (f"\n{len(split)} setting(s) hold rows scored by different scorer versions; each version is "
                 "its own row, tagged `scorer <version>` (run `python -m analysis.rescore DIR` to bring "
                 "them to the current scorers): " + "; ".join(split) + ".\n")
    return text


def _ci_text(value: float | None, kind: str) -> str:
    """One adaptation_ci value as the report shows it (``ms``: seconds shown in milliseconds)."""
    if kind == "ms":
        return fmt(None if value is None else 1000 * value, "num")
    return fmt(value, kind)


def adaptation_ci_rows(table: pa.Table) -> list[dict]:
    """``adaptation_ci`` in long form for the report: one row per (cell, metric) with the plain and
    adapted values, their difference and its bootstrap interval as text (the cell's keys kept)."""
    out = []
    for r in table.to_pylist():
        for k, (prefix, label, kind) in enumerate(ADAPT_CI_METRICS):
            v = {side: _ci_text(r[f"{prefix}_{side}"], kind) for side in ("plain", "adapted", "diff", "lo", "hi")}
            first = k == 0  # the cell's benchmark and n once, on its first metric
            out.append({**r, "bench": row_label(r) if first else "", "n_shown": fmt(r["n"], "num") if first else "",
                        "metric": label, "plain": v["plain"], "adapted": v["adapted"], "diff": v["diff"],
                        "interval": f"[{v['lo']}, {v['hi']}]"})
    return out


def sections(tables: dict[str, pa.Table], compare: pa.Table | None, compare_dir: Path | None) -> list[str]:
    """The report's table sections in order (``compare``: the ``--compare`` table, B = ``compare_dir``);
    sections whose table is empty are left out."""
    cells = _rows(tables["cells"], scope="benchmark")
    dist = tables["distribution"]
    note = fingerprint_note(tables["fingerprints"])
    out = [
        *([note] if note else []),
        "## Runs\n\n" + markdown(tables["run_list"], RUNS),
        "## Table 1 — quality and residual cost per cell\n\nQuality in percent; forwards after the final "
        "token are medians; speedups are per-request base / residual, summarised by mean and median. "
        "Only included requests enter a statistic; the count columns say how many rows were excluded or "
        "errors.\n\n" + markdown(cells, table1(), blank_repeats="setting"),
        "## Table 2 — per model, with macro average and pooled\n\n`average (macro)` is the mean of the "
        "benchmarks' statistics; `pooled` is the statistic over all included requests of that setting.\n\n"
        + markdown(tables["models"], TABLE2, blank_repeats="setting"),
        "## Distribution of the gain\n\nShares of included requests (speedup in forwards unless marked "
        "wall).\n\n" + markdown(dist, GAIN, blank_repeats="setting"),
        "## Draft kept at the final update\n\n" + markdown(dist, KEPT, blank_repeats="setting"),
        "## Attainable limit and speculative overhead\n\nAttainable = base forwards / the family's minimum "
        "residual; overhead = (speculative + residual forwards) / base forwards.\n\n"
        + markdown(dist, LIMIT, blank_repeats="setting"),
        "## Share of the attainable speedup\n\nThe paper's share is a ratio of medians (median speedup / "
        "median attainable); the per-example share is the median of each request's speedup / attainable.\n\n"
        + markdown(tables["attainable"], ATTAIN, blank_repeats="setting"),
        "## Per-model speedup, pooled over benchmarks (Figure 2)\n\n" + markdown(tables["model_speedups"], BY_MODEL),
        "## Speed against correctness\n\nIncluded requests by speed (speedup in forwards vs 1×) and by "
        "whether the stream answer differs from the base answer; quality changed = stream and base scores "
        "differ.\n\n" + markdown(tables["speed_quality"], CROSS, blank_repeats="setting"),
        "## Excluded and error rows\n\n" + markdown(tables["exclusions"], EXCLUSIONS),
    ]
    if tables["rescored"].num_rows or _scorer_split(tables["cells"]):
        out.insert(1, rescored_section(tables))
    if tables["divergence"].num_rows:
        out.append(
            "## Greedy stream vs base: where they part (numerics)\n\nIncluded greedy pairs. Margins are "
            "the base run's top-1 − top-2 logit at the first differing token, in spacings of the dtype at "
            "that logit (sp); draft branch = the stream's token there was an accepted draft token; Δq = "
            "stream − base quality (diverged pairs, 95 % bootstrap interval; all pairs). docs/numerics.md.\n\n"
            + markdown(tables["divergence"], DIVERGENCE, blank_repeats="setting"))
    if tables["adaptation"].num_rows:
        out.append(
            "## Adaptation before → after (Table 3)\n\n"
            + markdown(tables["adaptation"], ADAPT, blank_repeats="setting")
        )
    if tables["adaptation_ci"].num_rows:
        out.append(
            "## Table 3 with paired 95 % intervals\n\nOver the examples included for both the plain model "
            "and the variant, paired by example id; Δ = adapted − plain with a percentile bootstrap interval "
            "(1000 resamples of the paired examples; the average row resamples each benchmark on its own). "
            "Shares and their Δ in percent (points); `analysis/sql/adaptation_ci.sql`.\n\n"
            + markdown(adaptation_ci_rows(tables["adaptation_ci"]), ADAPT_CI, blank_repeats="setting")
        )
    if len({(r["acceptance"], r["tau"]) for r in tables["tau_sweep"].to_pylist()}) > 1:
        out.append("## τ sweep — quality against median speedup\n\n" + markdown(tables["tau_sweep"], SWEEP))
    if tables["step_summary"].num_rows:
        out.append(
            "## Steps of the stream runs\n\n"
            + markdown(tables["step_summary"], STEPS, blank_repeats="setting")
        )
        out.append(
            "## Drafts that did not change\n\nA step's draft compared with the previous step's (by the hash "
            "of its token ids).\n\n" + markdown(tables["draft_stability"], STABLE, blank_repeats="setting")
        )
    if compare is not None:
        out.append(
            f"## Comparison — A = this run, B = `{compare_dir}`\n\nΔ = B − A.\n\n"
            + markdown(compare, COMPARE, blank_repeats="setting")
        )
    return out
