"""The nightly regression check: summarise a run of a fixed grid and compare it with a stored baseline.

Every statistic comes from the report's SQL (``analysis/sql/regression_cells.sql`` over the
``pair_rows`` view of ``_views.sql``): which rows are included, the speedups and the quality means
are defined once, there; this module only names cells, compares and renders.

What is compared (docs/cluster.md, "Nightly"):

- **exact, per example**: forward counts (base, residual, speculative), final draft/accepted lengths,
  answer lengths, exclusion reason, error type. They are deterministic: any difference is a regression.
- **gated, per cell** (model × benchmark × acceptance/τ × verifier mode): mean base and stream
  quality, median forward speedup. Each has a tolerance derived when the baseline is made from
  ``runs`` repeated runs: ``max(floor, spread_factor × (max − min))``. Deterministic metrics show no
  spread, so their tolerance is the floor (1e-9: any real move fails).
- **reported, never gated**: wall-clock figures (median wall speedup, median base wall) as ratios
  now / baseline; they depend on the machine and its load.

A cell *moved* when any of its examples differs exactly or any gated metric is out of tolerance.
The baseline is a JSON file in the repository (reviewable in a diff), refreshed only deliberately.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import analysis.tables as tables
from streamgen.acceptance_rules import column_label
from streamgen.results.cells import cell_label

log = logging.getLogger(__name__)

BASELINE_SCHEMA = 1
EXACT_FIELDS = ("base_forwards", "residual_forwards", "speculative_forwards", "draft_tokens_final",
                "accepted_tokens_final", "base_answer_tokens", "stream_answer_tokens", "excluded_reason",
                "error_type")
GATED = ("base_quality", "stream_quality", "median_forward_speedup")
REPORTED = ("median_wall_speedup", "median_base_wall_s")
DEFAULT_FLOORS = {"base_quality": 1e-9, "stream_quality": 1e-9, "median_forward_speedup": 1e-9}
SPREAD_FACTOR = 3.0


class BaselineError(ValueError):
    """The baseline cannot be made or read (e.g. forward counts differ between repeated runs)."""


@dataclass(frozen=True)
class RunSummary:
    """One run of the grid: exact fields per example, metrics per cell, answers for the report."""

    examples: dict[str, dict[str, Any]]  # example key -> EXACT_FIELDS
    cells: dict[str, dict[str, float | None]]  # cell key -> GATED + REPORTED + n


def cell_key(r: dict[str, Any]) -> str:
    return cell_label(r["model"], r["benchmark"], column_label(r["acceptance"], r["tau"]), r.get("verifier_mode"))


def example_key(r: dict[str, Any]) -> str:
    return f"{cell_key(r)} :: {r['example_id']}"


def summarise(results_dir: str | Path) -> RunSummary:
    """Per-example exact fields and per-cell statistics of one run directory, both from DuckDB SQL
    (``regression_examples.sql``, ``regression_cells.sql``) over the report's views.

    Raises :class:`BaselineError` when an example appears twice (the directory mixes runs, or two
    fingerprints share one cell name). A directory without results gives an empty summary.
    """
    try:
        con = tables.connect(results_dir)
    except tables.ResultsNotFoundError:
        log.warning("no result files under %s/pairs", results_dir)
        return RunSummary({}, {})
    try:
        examples = _examples(tables.run_table(con, "regression_examples").to_pylist())
        cells = _cells(tables.run_table(con, "regression_cells").to_pylist())
    finally:
        con.close()
    return RunSummary(examples, cells)


def _examples(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    examples: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = example_key(r)
        if key in examples or r["copies"] > 1:
            raise BaselineError(f"{key} appears twice: the results directory mixes runs; use a fresh one")
        examples[key] = {f: r[f] for f in EXACT_FIELDS}
    return dict(sorted(examples.items()))


def _cells(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    cells: dict[str, dict[str, float | None]] = {}
    for r in rows:
        key = cell_key(r)
        if key in cells:
            raise BaselineError(f"cell {key} has two fingerprints (settings differ between its rows): "
                                "the results directory mixes runs; use a fresh one")
        cells[key] = {"n": float(r["n"]), **{m: r[m] for m in (*GATED, *REPORTED)}}
    return dict(sorted(cells.items()))


# --------------------------------------------------------------------------------------------
# Baseline
# --------------------------------------------------------------------------------------------


def build_baseline(runs: Sequence[RunSummary], *, grid_yaml: str, code_version: str,
                   floors: dict[str, float] | None = None, spread_factor: float = SPREAD_FACTOR) -> dict[str, Any]:
    """A baseline from repeated runs; refuses when exact fields differ between runs (not deterministic)."""
    if not runs or not all(r.examples for r in runs):
        raise BaselineError("a run without results cannot be a baseline: did the grid fail?")
    first = runs[0]
    for i, run in enumerate(runs[1:], start=2):
        diffs = exact_differences(first.examples, run.examples)
        if diffs:
            raise BaselineError(f"run {i} differs from run 1 in {len(diffs)} exact field(s), e.g. {diffs[0]}: "
                                "forward counts are not deterministic here; fix that before making a baseline")
    floors = {**DEFAULT_FLOORS, **(floors or {})}
    cells: dict[str, Any] = {}
    for key, metrics in first.cells.items():
        gated = {}
        for m in GATED:
            values: list[float] = [v for r in runs if (v := r.cells[key][m]) is not None]
            spread = (max(values) - min(values)) if values else 0.0
            gated[m] = {"value": metrics[m], "spread": spread, "tolerance": max(floors[m], spread_factor * spread)}
        cells[key] = {"n": metrics["n"], "gated": gated, "reported": {m: metrics[m] for m in REPORTED}}
    return {"schema": BASELINE_SCHEMA, "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "code_version": code_version, "runs": len(runs), "spread_factor": spread_factor, "floors": floors,
            "grid_yaml": grid_yaml, "cells": cells, "examples": first.examples}


def read_baseline(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise BaselineError(f"no baseline at {path}: make one deliberately with "
                            "`python workflows/nightly.py --update-baseline` and commit it")
    data = json.loads(path.read_text())
    if data.get("schema") != BASELINE_SCHEMA:
        raise BaselineError(f"{path} has baseline schema {data.get('schema')}, expected {BASELINE_SCHEMA}: "
                            "refresh it with --update-baseline")
    return data


def write_baseline(baseline: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline, indent=1, sort_keys=False, ensure_ascii=False) + "\n")
    return path


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """One reason a cell moved."""

    cell: str
    what: str  # e.g. 'residual_forwards of HumanEval/0' or 'median_forward_speedup'
    baseline: Any
    now: Any
    tolerance: str  # 'exact' or '±x'


@dataclass
class Comparison:
    moves: list[Move]
    cells: dict[str, dict[str, Any]]  # per cell: gated now/baseline, reported ratios, status

    @property
    def moved_cells(self) -> list[str]:
        return sorted({m.cell for m in self.moves})

    @property
    def passed(self) -> bool:
        return not self.moves


def exact_differences(base: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> list[Move]:
    """Per-example exact mismatches, and examples present on one side only."""
    moves = []
    for key in sorted(set(base) | set(now)):
        cell, example = key.split(" :: ", 1)
        if key not in now:
            moves.append(Move(cell, f"example {example}", "present", "missing (failed shard or changed grid)", "exact"))
            continue
        if key not in base:
            moves.append(Move(cell, f"example {example}", "absent", "new (changed grid)", "exact"))
            continue
        for f in EXACT_FIELDS:
            if base[key][f] != now[key][f]:
                moves.append(Move(cell, f"{f} of {example}", base[key][f], now[key][f], "exact"))
    return moves


def _ratio(now: float | None, base: float | None) -> float | None:
    return now / base if now is not None and base else None


def compare(baseline: dict[str, Any], run: RunSummary) -> Comparison:
    """Compare one run with the baseline: exact per example, gated per cell, wall clock reported."""
    moves = exact_differences(baseline["examples"], run.examples)
    cells: dict[str, dict[str, Any]] = {}
    for key in sorted(set(baseline["cells"]) | set(run.cells)):
        base, now = baseline["cells"].get(key), run.cells.get(key)
        if base is None or now is None:
            continue  # already reported per example
        row: dict[str, Any] = {"n": now["n"]}
        for m in GATED:
            b, tol = base["gated"][m]["value"], base["gated"][m]["tolerance"]
            row[m] = (b, now[m])
            if (b is None) != (now[m] is None) or (b is not None and abs(now[m] - b) > tol):
                moves.append(Move(key, m, b, now[m], f"±{tol:.3g}"))
        for m in REPORTED:
            row[f"{m}_ratio"] = _ratio(now[m], base["reported"][m])
        cells[key] = row
    for key, row in cells.items():
        row["status"] = "MOVED" if any(m.cell == key for m in moves) else "ok"
    return Comparison(moves, cells)


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def render_markdown(cmp: Comparison, baseline: dict[str, Any], *, results_dir: str, code_version: str) -> str:
    """The nightly report: verdict, the moved cells with what moved, every cell, wall-clock ratios."""
    verdict = "PASS" if cmp.passed else f"FAIL: {len(cmp.moved_cells)} cell(s) moved"
    lines = [f"# Nightly regression report: {verdict}", "",
             f"- results: `{results_dir}` (code {code_version})",
             f"- baseline: made {baseline['created_at']} from {baseline['runs']} run(s) "
             f"(code {baseline['code_version']}); tolerance = max(floor, {baseline['spread_factor']:g} × spread)",
             ""]
    if cmp.moves:
        lines += ["## Moved cells", "", "| cell | what moved | baseline | now | tolerance |", "|---|---|---|---|---|"]
        lines += [f"| {m.cell} | {m.what} | {_fmt(m.baseline)} | {_fmt(m.now)} | {m.tolerance} |" for m in cmp.moves]
        lines += ["", "If the change is intended, refresh the baseline deliberately "
                  "(`python workflows/nightly.py --update-baseline`) and commit it with the change.", ""]
    lines += ["## Cells", "",
              "| cell | n | base quality (base→now) | stream quality | median forward speedup | status |",
              "|---|---|---|---|---|---|"]
    for key, row in cmp.cells.items():
        gated = [f"{_fmt(row[m][0])}→{_fmt(row[m][1])}" for m in GATED]
        lines.append(f"| {key} | {_fmt(int(row['n']))} | {' | '.join(gated)} | {row['status']} |")
    lines += ["", "## Wall clock (reported, not gated: now / baseline)", "",
              "| cell | median wall speedup ratio | median base wall ratio |", "|---|---|---|"]
    lines += [f"| {key} | {_fmt(row['median_wall_speedup_ratio'])} | {_fmt(row['median_base_wall_s_ratio'])} |"
              for key, row in cmp.cells.items()]
    return "\n".join(lines) + "\n"


class RegressionCheck(NamedTuple):
    """A run against the baseline: whether every cell held (``passed``) and the markdown report."""

    passed: bool
    report: str


def regression_check(baseline: dict[str, Any], run_dir: str | Path, *, code_version: str) -> RegressionCheck:
    """``run_dir`` summarised, compared with ``baseline`` and rendered (the nightly's one call)."""
    cmp = compare(baseline, summarise(run_dir))
    return RegressionCheck(cmp.passed, render_markdown(cmp, baseline, results_dir=str(run_dir),
                                                       code_version=code_version))


def baseline_from_runs(run_dirs: Iterable[str | Path], *, grid_yaml: str, code_version: str) -> dict[str, Any]:
    """A baseline from repeated runs of the grid, each summarised as it comes (``run_dirs`` may be lazy)."""
    return build_baseline([summarise(d) for d in run_dirs], grid_yaml=grid_yaml, code_version=code_version)
