"""Figures of the typing analysis: wait against typing rate, p95 wait against the number of users, and the
CDF of waits over a typist population.

Drawn on ``matplotlib.figure.Figure`` with the Agg canvas (no pyplot state), like analysis/figures.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.axes import Axes

from analysis.figure_pool import FigureJob, GridMargins, new_figure, save, save_grid
from analysis.figures import slug
from analysis.render import setting_label

_SETTING = ("model", "acceptance", "tau", "variant", "verifier_mode")


def wait_against_rate(summary: pa.Table, out_dir: Path) -> list[FigureJob]:
    """One PNG per model setting: median wait vs typing rate, one panel per benchmark, one line per
    post-hoc policy, the base wait dashed, live figures as crosses (the figures to draw: ``draw_all``)."""
    rows = summary.to_pylist()
    settings: dict[tuple, list[dict]] = {}
    for r in rows:
        settings.setdefault(tuple(r[k] for k in _SETTING), []).append(r)
    jobs = []
    for key, sub in settings.items():
        label = setting_label(dict(zip(_SETTING, key, strict=True)))
        jobs.append(FigureJob(_draw_wait, (label, sub), out_dir / f"typing-wait-{slug(label)}.png"))
    return jobs


def _draw_wait(label: str, sub: list[dict], path: Path) -> None:
    benches = sorted({r["benchmark"] for r in sub})
    ncols = min(3, len(benches))  # a grid like the speedup figure: readable at its natural size
    nrows = -(-len(benches) // ncols)
    fig = new_figure((4.2 * ncols, 3.0 * nrows + 0.8))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, bench in zip(axes.flat, benches, strict=False):
        _panel(ax, [r for r in sub if r["benchmark"] == bench], bench)
    for ax in list(axes.flat)[len(benches):]:
        ax.set_visible(False)
    handles: dict[str, Any] = {}
    for ax in axes.flat:  # one legend for the figure, below the panels, never over the data
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.suptitle(f"Wait after the last keystroke — {label}")
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(4, len(handles)), fontsize=8)
    legend_rows = -(-len(handles) // min(4, len(handles))) if handles else 0
    save_grid(fig, path, nrows, ncols, replace(_WAIT, bottom=_WAIT.bottom + 0.2 * legend_rows))


_WAIT = GridMargins(wgap=0.8, hgap=0.75, top=0.65)  # every panel has its y label; one-line titles


def _panel(ax: Axes, rows: list[dict], bench: str) -> None:
    post = [r for r in rows if r["source"] == "post_hoc"]
    for policy in sorted({r["policy"] for r in post}):
        pts = sorted((r["rate"], r["median_wait_s"]) for r in post if r["policy"] == policy)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=policy)
    base = sorted({(r["rate"], r["median_base_wait_s"]) for r in post if r["policy"] == "every"})
    if base:
        ax.plot([b[0] for b in base], [b[1] for b in base], "k--", label="base (submit, then decode)")
    for r in (r for r in rows if r["source"] == "live"):
        ax.plot([r["rate"]], [r["median_wait_s"]], "x", markersize=9, label=f"live {r['policy']}")
    ax.set_title(bench)
    ax.set_xlabel("typing rate (chars/s)")
    ax.set_ylabel("median wait (s)")


def p95_against_users(table: pa.Table, path: Path, title: str) -> Path:
    """p95 wait against K, one line per simulated policy (log-2 x axis)."""
    rows = table.to_pylist()
    fig = new_figure((5.5, 3.8))
    ax = fig.add_subplot(1, 1, 1)
    for policy in dict.fromkeys(r["policy"] for r in rows):
        pts = sorted((r["users"], r["p95_wait_s"]) for r in rows if r["policy"] == policy)
        style = "k--" if policy == "submit_then_decode" else "-"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=policy)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("users typing at once (K)")
    ax.set_ylabel("p95 wait after last keystroke (s)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    save(fig, path)
    return path


def population_wait_cdfs(examples: pa.Table, out_dir: Path) -> list[FigureJob]:
    """One PNG per model setting: the CDF of the (user, request) wait, one line per policy and the base
    wait dashed, a panel per benchmark (rows) and preset (columns); each panel names its preset."""
    rows = examples.filter(pc.is_valid(examples["wait_s"])).to_pylist()
    settings: dict[tuple, list[dict]] = {}
    for r in rows:
        settings.setdefault(tuple(r[k] for k in _SETTING), []).append(r)
    jobs = []
    for key, sub in settings.items():
        label = setting_label(dict(zip(_SETTING, key, strict=True)))
        jobs.append(FigureJob(_draw_cdfs, (label, sub), out_dir / f"population-wait-{slug(label)}.png"))
    return jobs


def _draw_cdfs(label: str, sub: list[dict], path: Path) -> None:
    benches, presets = sorted({r["benchmark"] for r in sub}), list(dict.fromkeys(r["preset"] for r in sub))
    fig = new_figure((4.2 * len(presets), 3.0 * len(benches) + 0.6))
    axes = fig.subplots(len(benches), len(presets), squeeze=False)
    for (b, bench), (p, preset) in ((x, y) for x in enumerate(benches) for y in enumerate(presets)):
        _cdf_panel(axes[b][p], [r for r in sub if r["benchmark"] == bench and r["preset"] == preset], bench, preset)
    fig.suptitle(f"Wait over a typist population — {label}")
    save(fig, path)


def _cdf_panel(ax: Axes, rows: list[dict], bench: str, preset: str) -> None:
    for policy in sorted({r["policy"] for r in rows}):
        waits = np.sort([r["wait_s"] for r in rows if r["policy"] == policy])
        ax.step(waits, np.arange(1, waits.size + 1) / waits.size, where="post", label=policy)
    first = sorted({r["policy"] for r in rows})[0] if rows else None
    base = np.sort([r["base_wait_s"] for r in rows if r["policy"] == first])
    if base.size:
        ax.step(base, np.arange(1, base.size + 1) / base.size, "k--", where="post", label="base (submit, then decode)")
    users = rows[0]["users"] if rows else 0
    seed = rows[0]["seed"] if rows else 0
    drawn = f"({users} users, seed {seed})" if not preset.startswith("keylog:") else \
        f"({len({r['example_id'] for r in rows})} requests, as logged)"
    ax.set_title(f"{bench} · preset {preset} {drawn}", fontsize=9)
    ax.set_xlabel("wait after the last keystroke (s)")
    ax.set_ylabel("share of (user, request)")
    ax.legend(fontsize=7)
