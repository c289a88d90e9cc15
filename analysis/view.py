"""The results viewer: a static HTML folder to look at every example of a results directory.

    python -m analysis.view results/local                 # writes results/local/report/viewer/index.html
    python -m analysis.view results/local --out /tmp/view # elsewhere
    python -m analysis.view results/local --latest        # per cell, only the newest run's settings

Open ``index.html`` from disk (``file://``): no server, no network. Pick a cell and an example; the
page shows the request segment by segment, each step's incoming draft with its kept run and its
thrown-away tail, accepted / generated / forwards per step, the base and stream answers side by side
with their difference, score status and quality of each, and the cell's settings. Filters: kept
whole / nothing / part at the final step, stream ≠ base, errors; sorting by the slowest residual.

Layout: ``index.html`` + ``viewer.js`` (copied from ``analysis/viewer/``), a ``data`` folder with ``cells.js`` (the
cell list) and one ``cell-NNNN.js`` per cell, loaded by a ``<script>`` tag when the cell is picked
(browsers block ``fetch()`` of ``file://``), so a study of 10^5 examples loads one cell at a time.
The rows are read through ``analysis.tables.connect``: each (cell fingerprint, example) once, as in
every table. The step texts (``arrived_text``, ``draft_kept_text``, ``draft_thrown_text``) are null in
results written before they existed; the page then shows the counts alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import duckdb

from analysis.render import setting_label
from analysis.tables import ResultsNotFoundError, connect
from streamgen.results.manifest import ManifestError

log = logging.getLogger(__name__)

ASSETS = Path(__file__).with_name("viewer")
CELL_KEY = ("model", "family", "benchmark", "acceptance", "tau", "variant", "verifier_mode", "settings_tag")
PAIR_COLUMNS = (
    "example_id", "run_id", "n_segments", "excluded_reason", "error_type", "error_traceback",
    "base_forwards", "residual_forwards", "speculative_forwards", "base_wall_s", "residual_wall_s",
    "speculative_wall_s", "min_residual_forwards", "draft_tokens_final", "accepted_tokens_final",
    "base_answer_tokens", "stream_answer_tokens", "base_answer", "stream_answer", "base_quality",
    "stream_quality", "base_score_status", "stream_score_status", "run_order", "device",
)
DERIVED_COLUMNS = ("kept", "answer_changed", "s_fwd", "s_wall")  # from pair_rows: one definition (_views.sql)
STEP_COLUMNS = (
    "step", "is_final", "prefix_chars", "arrived_text", "draft_tokens_in", "accepted_tokens",
    "draft_kept_text", "draft_thrown_text", "generated_tokens", "forwards", "tokens_fed", "wall_s",
    "verify_median_prob", "first_change_char", "chars_deleted",
)

_PAIRS_SQL = f"""
CREATE TEMP TABLE view_pairs AS
SELECT dense_rank() OVER (ORDER BY {", ".join(f"p.{k} NULLS FIRST" for k in CELL_KEY)}, p.cell_fingerprint) - 1
           AS cell_idx,
       row_number() OVER (ORDER BY p.cell_fingerprint, p.example_id, p.run_id) - 1 AS pair_idx,
       p.cell_fingerprint, p.cell_id, p.cell_settings, {", ".join(f"p.{k}" for k in CELL_KEY if k != "model")},
       p.model, {", ".join(f"p.{c}" for c in PAIR_COLUMNS if c not in ("example_id", "run_id"))},
       p.example_id, p.run_id, {", ".join(f"r.{c}" for c in DERIVED_COLUMNS)}
FROM pairs p
JOIN pair_rows_done r
  ON p.cell_fingerprint = r.cell_fingerprint AND p.example_id = r.example_id AND p.run_id = r.run_id
"""
_STEPS_SQL = f"""
SELECT v.pair_idx, {", ".join(f"s.{c}" for c in STEP_COLUMNS)}
FROM steps s
JOIN view_pairs v ON s.run_id = v.run_id AND s.cell_id = v.cell_id AND s.example_id = v.example_id
ORDER BY v.pair_idx, s.step
"""


class Viewer(NamedTuple):
    """What :func:`write_viewer` wrote."""

    page: Path  # index.html
    n_cells: int
    n_pairs: int
    n_steps: int
    bytes_written: int


def write_viewer(results_dir: str | Path, out_dir: str | Path | None = None, *, latest: bool = False,
                 threads: int | None = None) -> Viewer:
    """Write the viewer for ``results_dir`` into ``out_dir`` (default ``RESULTS_DIR/report/viewer``)."""
    root = Path(results_dir)
    out = Path(out_dir) if out_dir else root / "report" / "viewer"
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    for stale in data.glob("cell*.js"):
        stale.unlink()
    for asset in ("index.html", "viewer.js"):
        shutil.copyfile(ASSETS / asset, out / asset)
    con = connect(root, threads=threads, latest=latest)
    try:
        con.execute(_PAIRS_SQL)
        cells, n_pairs, n_steps = _write_cells(con, data)
    finally:
        con.close()
    index = {"results_dir": str(root), "step_columns": list(STEP_COLUMNS), "cells": cells}
    _write_js(data / "cells.js", "streamgenViewerCells", index)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    log.info("wrote %s: %d cells, %d examples, %d steps, %.1f MB", out / "index.html", len(cells), n_pairs,
             n_steps, size / 1e6)
    return Viewer(out / "index.html", len(cells), n_pairs, n_steps, size)


def _write_cells(con: duckdb.DuckDBPyConnection, data: Path) -> tuple[list[dict[str, Any]], int, int]:
    """One JS file per cell; returns the cell list for ``cells.js`` and the pair and step counts."""
    steps = _steps_by_pair(con.execute(_STEPS_SQL))
    n_steps = sum(len(v) for v in steps.values())
    cur = con.execute("SELECT * FROM view_pairs ORDER BY cell_idx, example_id, run_id")
    names = [d[0] for d in cur.description]
    cells: list[dict[str, Any]] = []
    n_pairs, current = 0, None
    examples: list[dict[str, Any]] = []
    for rows in iter(lambda: cur.fetchmany(4096), []):
        for values in rows:
            row = dict(zip(names, values, strict=True))
            if current is not None and row["cell_idx"] != current["cell_idx"]:
                cells.append(_write_cell(data, current, examples))
                examples = []
            current = row
            examples.append(_example(row, steps.pop(row["pair_idx"], [])))
            n_pairs += 1
    if current is not None:
        cells.append(_write_cell(data, current, examples))
    return cells, n_pairs, n_steps


def _steps_by_pair(cur: duckdb.DuckDBPyConnection) -> dict[int, list[list[Any]]]:
    out: dict[int, list[list[Any]]] = {}
    for rows in iter(lambda: cur.fetchmany(8192), []):
        for pair_idx, *values in rows:
            out.setdefault(pair_idx, []).append([_clean(v) for v in values])
    return out


def _example(row: dict[str, Any], steps: list[list[Any]]) -> dict[str, Any]:
    out = {c: _clean(row[c]) for c in (*PAIR_COLUMNS, *DERIVED_COLUMNS)}
    out["steps"] = steps
    return out


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities (never written by the grid, but possible in a foreign file) → null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _write_cell(data: Path, first: dict[str, Any], examples: list[dict[str, Any]]) -> dict[str, Any]:
    """Write one cell's examples; returns its entry in the cell list (label, settings, filter counts)."""
    name = f"cell-{first['cell_idx']:04d}"
    _write_js(data / f"{name}.js", "streamgenViewerCell", {"name": name, "examples": examples})
    key = {k: first[k] for k in CELL_KEY}
    return {
        "name": name, "label": f"{setting_label(key)} / {first['benchmark']}", **key,
        "cell_fingerprint": first["cell_fingerprint"], "cell_id": first["cell_id"],
        "settings": json.loads(first["cell_settings"]) if first["cell_settings"] else None,
        "counts": counts(examples),
    }


def counts(examples: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Examples per filter of the page (kept class at the final step, stream ≠ base, errors, excluded)."""
    out = dict.fromkeys(("n", "all", "none", "part", "no_draft", "changed", "error", "excluded"), 0)
    for ex in examples:
        out["n"] += 1
        if ex["kept"]:
            out[ex["kept"]] += 1
        out["changed"] += bool(ex["answer_changed"])
        out["error"] += ex["error_type"] is not None
        out["excluded"] += ex["error_type"] is None and ex["excluded_reason"] is not None
    return out


def _write_js(path: Path, callback: str, payload: dict[str, Any]) -> None:
    """``callback(payload);`` — a script the page loads with a ``<script>`` tag (works from file://)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    path.write_text(f"{callback}({text});\n", encoding="utf-8")


def read_js(path: str | Path) -> dict[str, Any]:
    """The payload of a data file :func:`write_viewer` wrote (for tests and scripts)."""
    text = Path(path).read_text(encoding="utf-8")
    return dict(json.loads(text[text.index("(") + 1: text.rindex(")")]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.view", description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="output folder (default RESULTS_DIR/report/viewer)")
    parser.add_argument("--latest", action="store_true", help="per cell, only the most recent run's settings")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: all cores)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        viewer = write_viewer(args.results_dir, args.out, latest=args.latest, threads=args.threads)
    except (ResultsNotFoundError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"viewer: {viewer.page} ({viewer.n_cells} cells, {viewer.n_pairs} examples, "
          f"{viewer.bytes_written / 1e6:.1f} MB) — open it in a browser, no server needed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
