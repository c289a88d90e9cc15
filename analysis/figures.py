"""Figures of the report (matplotlib, Agg backend): speedup distributions and the τ sweep.

``speedup_distributions`` draws paper Figure 1: per-example residual speedup in forwards, one
figure per model setting (model, acceptance/τ, variant, verifier mode), one panel per benchmark,
log x axis, the 1× line, the median (solid) and mean (dashed) marked. ``model_distributions`` draws
Figure 2 the same way: one figure per acceptance setting, one panel per model, benchmarks pooled. ``tau_sweeps`` draws quality
against median speedup across acceptance settings, one figure per (model, variant, verifier mode).
Figures are built on ``matplotlib.figure.Figure`` with the Agg canvas directly, so no pyplot global
state and no interactive backend is touched. Each function returns the figures to draw
(``analysis.figure_pool.FigureJob``: the few arrays a figure plots), which the report draws in a
process pool (``figure_pool.draw_all``).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.ticker import NullLocator

from analysis.figure_pool import FigureJob, GridMargins, new_figure, save, save_grid
from analysis.render import setting_label
from analysis.sql_template import KEYS
from streamgen.acceptance_rules import column_label

log = logging.getLogger(__name__)

SETTING = KEYS["setting"]  # a model setting: the setting key without benchmark (analysis.sql_template)


def slug(text: str) -> str:
    """A file-name-safe form of a label."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text.replace("τ=", "tau")).strip("-").lower()


def _groups(rows: Sequence[dict], keys: Sequence[str]) -> Iterator[tuple[dict, list[dict]]]:
    """Consecutive runs of ``rows`` sharing ``keys`` (the SQL output is ordered by them)."""
    current: list[dict] = []
    for row in rows:
        if current and any(row[k] != current[0][k] for k in keys):
            yield {k: current[0][k] for k in keys}, current
            current = []
        current.append(row)
    if current:
        yield {k: current[0][k] for k in keys}, current


SPEEDUP_TICKS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200)
WIDE_SPEEDUP_TICKS = (0.1, 0.5, 1, 2, 5, 10, 100, 1000, 10000)  # past 200×: decades, so labels never touch


def speedup_distributions(per_example: pa.Table, out_dir: Path) -> list[FigureJob]:
    """One PNG per model setting (none when there are no rows): the figures to draw (``draw_all``)."""
    speedups = per_example["speedup_forwards"].to_numpy(zero_copy_only=False).astype(float)
    jobs: list[FigureJob] = []
    for key, start, stop in _runs(per_example, SETTING):
        sub = _runs(per_example.slice(start, stop - start), ("benchmark",))
        arrays = {k["benchmark"]: speedups[start + a : start + b] for k, a, b in sub}
        label = setting_label(key)
        path = out_dir / f"speedup-{slug(label)}.png"
        panels = {b: a[a > 0] for b, a in sorted(arrays.items()) if (a > 0).any()}
        jobs.append(FigureJob(_draw_distribution, (label, panels), path))
    return jobs


def _runs(table: pa.Table, keys: Sequence[str]) -> list[tuple[dict, int, int]]:
    """(key values, start, stop) of each run of rows sharing ``keys`` (the SQL output is ordered)."""
    if table.num_rows == 0:
        return []
    starts = run_starts(table, keys).tolist()
    stops = starts[1:] + [table.num_rows]
    firsts = table.select(list(keys)).take(starts).to_pylist()
    return list(zip(firsts, starts, stops, strict=True))


def run_starts(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """Row index where each run of rows sharing ``keys`` starts (NULL equals NULL; empty: none)."""
    n = table.num_rows
    changed = np.zeros(n, dtype=bool)
    if n:
        changed[0] = True
    for k in keys:  # compare dictionary codes: cheap on 10^6 strings
        codes = pc.dictionary_encode(table[k].combine_chunks(), null_encoding="encode").indices
        c = codes.to_numpy(zero_copy_only=False)
        changed[1:] |= c[1:] != c[:-1]
    return np.flatnonzero(changed)


def model_distributions(per_example: pa.Table, out_dir: Path) -> list[FigureJob]:
    """Paper Figure 2: one PNG per acceptance setting, one panel per model (with its variant, verifier
    mode and settings tag), each panel the per-example speedups pooled over all its benchmarks."""
    speedups = per_example["speedup_forwards"].to_numpy(zero_copy_only=False).astype(float)
    by_rule: dict[tuple, dict[str, list[np.ndarray]]] = {}
    for key, start, stop in _runs(per_example, SETTING):  # per run of a setting, not per row (~5·10^5 rows at full size)
        panel = setting_label(key, with_rule=False)
        by_rule.setdefault((key["acceptance"], key["tau"]), {}).setdefault(panel, []).append(speedups[start:stop])
    jobs: list[FigureJob] = []
    for (acceptance, tau), panels in sorted(by_rule.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1.0)):
        rule = column_label(acceptance, tau)
        arrays = {m: np.concatenate(v) for m, v in sorted(panels.items())}
        path = out_dir / f"speedup-by-model-{slug(rule)}.png"
        drawn = {m: a[a > 0] for m, a in arrays.items() if (a > 0).any()}
        jobs.append(FigureJob(_draw_distribution, (f"{rule}, pooled over benchmarks", drawn), path))
    return jobs


_DISTRIBUTION = GridMargins(bottom=0.9, top=0.85, hgap=1.1)  # a legend below, two-line panel titles


def _draw_distribution(label: str, by_bench: dict[str, np.ndarray], path: Path) -> None:
    """One panel per benchmark; the median and mean values in each panel's title, the line key once below
    the panels (a legend per panel cost ~20 % of the figure)."""
    ncols = min(3, len(by_bench))
    nrows = math.ceil(len(by_bench) / ncols)
    narrow = ncols == 1  # the suptitle takes two lines on one panel's width
    fig = new_figure((4.2 * ncols, 3.0 * nrows + 0.5 + 0.2 * narrow))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    everything = np.concatenate(list(by_bench.values()))
    lo, hi = min(everything.min(), 0.5) * 0.9, max(everything.max(), 2.0) * 1.1
    bins = np.geomspace(lo, hi, 40)
    ticks = [t for t in (SPEEDUP_TICKS if hi / lo <= 200 else WIDE_SPEEDUP_TICKS) if lo <= t <= hi]
    for ax, (bench, values) in zip(axes.flat, by_bench.items(), strict=False):
        # one filled step outline per panel (ax.hist draws a patch per bin: the same picture, slower)
        ax.stairs(np.histogram(values, bins=bins)[0], bins, fill=True, color="#4c72b0")
        ax.set_xscale("log")
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])  # labelled speedups, no unlabelled minor ticks
        ax.xaxis.set_minor_locator(NullLocator())
        median, mean = float(np.median(values)), float(values.mean())
        ax.axvline(1.0, color="grey", linestyle=":", linewidth=1.2, label="1×")
        ax.axvline(median, color="#c44e52", linewidth=1.6, label="median")
        ax.axvline(mean, color="#dd8452", linestyle="--", linewidth=1.6, label="mean")
        ax.set_title(f"{bench} (n={values.size})\nmedian {median:.2f}×, mean {mean:.2f}×", fontsize=9)
        ax.set_xlabel("residual speedup, forwards (×)")
    for ax in list(axes.flat)[len(by_bench) :]:
        ax.set_visible(False)
    axes[0][0].set_ylabel("requests")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(f"Per-example residual speedup{chr(10) if narrow else ' '}— {label}", fontsize=11)
    save_grid(fig, path, nrows, ncols, replace(_DISTRIBUTION, top=_DISTRIBUTION.top + 0.2 * narrow))


def tau_sweeps(tau_sweep: pa.Table, out_dir: Path) -> list[FigureJob]:
    """One PNG per (model, variant, verifier mode): stream quality vs median speedup across τ."""
    rows = tau_sweep.to_pylist()
    keys = ("model", "variant", "verifier_mode")
    jobs: list[FigureJob] = []
    for key, group in _groups(rows, keys):
        label = setting_label(key, with_rule=False)
        jobs.append(FigureJob(_draw_sweep, (label, group), out_dir / f"tau-sweep-{slug(label)}.png"))
    return jobs


def _draw_sweep(label: str, rows: list[dict], path: Path) -> None:
    """Threshold points joined in τ order; greedy as a star of the same colour (not on the line)."""
    fig = new_figure((7.4, 4.4))
    ax = fig.subplots()
    for key, series in _groups(rows, ("scope", "benchmark")):
        pts = [
            r
            for r in series
            if r["median_speedup_forwards"] is not None and r["stream_quality_pct"] is not None
        ]
        if not pts:
            continue
        is_macro = key["scope"] == "macro"
        thresholds = sorted((r for r in pts if r["tau"] is not None), key=lambda r: r["tau"])
        greedy = [r for r in pts if r["tau"] is None]
        xy = lambda rs: ([r["median_speedup_forwards"] for r in rs], [r["stream_quality_pct"] for r in rs])  # noqa: E731
        (line,) = ax.plot(
            *xy(thresholds),
            marker="o",
            linewidth=2.6 if is_macro else 1.0,
            color="black" if is_macro else None,
            label="average (macro)" if is_macro else key["benchmark"],
        )
        ax.plot(*xy(greedy), marker="*", markersize=11, linestyle="none", color=line.get_color())
        for r in pts:
            ax.annotate(
                column_label(r["acceptance"], r["tau"], table=True),
                (r["median_speedup_forwards"], r["stream_quality_pct"]),
                fontsize=6,
                textcoords="offset points",
                xytext=(3, 3),
            )
    ax.set_xscale("log")
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1.0)
    ax.set_xlabel("median residual speedup, forwards (×)")
    ax.set_ylabel("stream quality (%)")
    ax.set_title(f"Quality vs speedup across acceptance settings — {label}\n(★ greedy)", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    save(fig, path)
