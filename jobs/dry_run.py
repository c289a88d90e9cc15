"""The plan of a grid without running it (``--dry-run``): validate, count, estimate; start nothing.

``plan_dry_run(grid)`` validates the grid exactly as a run does (``jobs.plan.plan_grid``: configs,
weights where they say, benchmark data and scorers, the allocation against the work) plus the
cluster config (without contacting Slurm), then counts per cell the examples (and how many are excluded up front), the shards and the
shards already complete in ``results_dir``. When the results directory already holds rows of a
model, a small cost model fitted on them estimates forwards and decode time:

    forwards of one example ≈ k[model] × (n_segments + 1) × max_new_tokens
    seconds ≈ forwards × seconds_per_forward[model]

(``k`` = Σ all forwards / Σ (n_segments + 1) × budget over that model's included rows; base + stream
runs both scale with the budget, the stream run once per segment). Rows without ``cell_settings``
(written before it existed) carry no budget and are not used. No Ray, no model load.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from jobs.plan import GridPlan, plan_grid
from jobs.writer import ResultWriter
from streamgen.config import GridConfig, cluster_config, raise_if_problems
from streamgen.result_files import readable_files

log = logging.getLogger(__name__)

_COLUMNS = ("model", "n_segments", "base_forwards", "speculative_forwards", "residual_forwards",
            "base_wall_s", "speculative_wall_s", "residual_wall_s", "cell_settings", "excluded_reason",
            "error_type")


@dataclass(frozen=True)
class CostModel:
    """Per model: forwards per (segments + 1) × budget token, and seconds per forward."""

    forwards_per_unit: dict[str, float]
    seconds_per_forward: dict[str, float]
    n_rows: int
    source: Path

    @classmethod
    def fit(cls, results_dir: Path) -> CostModel:
        """Fit on every included pairs row with settings under ``results_dir`` (any depth)."""
        units: defaultdict[str, float] = defaultdict(float)
        forwards: defaultdict[str, float] = defaultdict(float)
        seconds: defaultdict[str, float] = defaultdict(float)
        n = 0
        for row in _rows(results_dir):
            budget = json.loads(row["cell_settings"]).get("max_new_tokens")
            if not budget or row["excluded_reason"] or row["error_type"] or row["base_forwards"] is None:
                continue
            fwd = row["base_forwards"] + row["speculative_forwards"] + row["residual_forwards"]
            units[row["model"]] += (row["n_segments"] + 1) * budget
            forwards[row["model"]] += fwd
            seconds[row["model"]] += row["base_wall_s"] + row["speculative_wall_s"] + row["residual_wall_s"]
            n += 1
        return cls({m: forwards[m] / units[m] for m in units if units[m]},
                   {m: seconds[m] / forwards[m] for m in forwards if forwards[m]}, n, results_dir)

    def estimate(self, model: str, n_segments: int, max_new_tokens: int) -> tuple[float, float] | None:
        """(forwards, seconds) of one example, or None when no row of ``model`` was seen."""
        if model not in self.forwards_per_unit:
            return None
        fwd = self.forwards_per_unit[model] * (n_segments + 1) * max_new_tokens
        return fwd, fwd * self.seconds_per_forward.get(model, 0.0)


def _rows(results_dir: Path) -> list[dict]:
    out: list[dict] = []
    for path in readable_files(results_dir, "pairs").files:  # foreign files skipped with a warning each
        names = pq.read_schema(path).names
        if "cell_settings" not in names:
            continue
        table = pq.read_table(path, columns=[c for c in _COLUMNS if c in names])
        out.extend(r for r in table.to_pylist() if r.get("cell_settings"))
    return out


@dataclass(frozen=True)
class CellLine:
    label: str
    examples: int
    excluded: int
    shards: int
    shards_done: int
    forwards: float | None  # estimated, for the shards still to run
    seconds: float | None


def _cell_lines(plan: GridPlan, results_dir: Path, cost: CostModel) -> list[CellLine]:
    writer = ResultWriter(results_dir)
    by_cell: dict[str, list] = defaultdict(list)
    for shard in plan.shards:
        by_cell[shard.cell.cell_id].append(shard)
    lines = []
    for shards in by_cell.values():
        cell, bench = shards[0].cell, shards[0].cell.benchmark.name
        done = [writer.is_complete(s) for s in shards]
        todo = [e for s, d in zip(shards, done, strict=True) if not d for e in s.example_ids]
        ests = [cost.estimate(cell.model.name, len(plan.segments[(bench, e)]), cell.max_new_tokens)
                for e in todo if not plan.excluded[(bench, e)]]
        known = all(x is not None for x in ests)
        lines.append(CellLine(
            cell.label, sum(len(s) for s in shards),
            sum(plan.excluded[(bench, e)] is not None for s in shards for e in s.example_ids),
            len(shards), sum(done),
            sum(x[0] for x in ests if x) if known else None, sum(x[1] for x in ests if x) if known else None))
    return lines


def plan_dry_run(grid: GridConfig, *, results_dir: str | Path | None = None,
                 fit_on: str | Path | None = None) -> str:
    """Validate ``grid`` and its cluster, and return the plan as text. Starts nothing, writes nothing.

    ``results_dir``: where complete shards are looked for (default ``grid.results_dir``); ``fit_on``:
    where the cost model's rows are read (default the same directory).
    """
    from jobs.executors import allocation, validate_cluster

    cluster = cluster_config(grid.cluster)
    raise_if_problems(validate_cluster(cluster), f"cluster {grid.cluster!r}")
    plan = plan_grid(grid, cluster, allocation(grid, cluster))  # the allocation against the work (jobs/resources.py)
    out_dir = Path(results_dir or grid.results_dir)
    cost = CostModel.fit(Path(fit_on or out_dir))
    return render(grid, plan, _cell_lines(plan, out_dir, cost), cost, out_dir)


def _num(x: float | None, unit: str = "") -> str:
    return "–" if x is None else f"{x:,.0f}{unit}"


def render(grid: GridConfig, plan: GridPlan, lines: list[CellLine], cost: CostModel, out_dir: Path) -> str:
    """The plan as a fixed-width table with totals and what the estimate rests on."""
    width = max([len(x.label) for x in lines] + [4])
    head = (f"dry run of grid {grid.name!r} (cluster {grid.cluster}; nothing started, nothing written)\n"
            f"results_dir {out_dir}: {len(lines)} cells, {len(plan.shards)} shards, "
            f"{sum(x.shards_done for x in lines)} already complete\n\n"
            f"{'cell':<{width}}  examples  excluded  shards  done  est. forwards  est. decode s")
    body = [f"{x.label:<{width}}  {x.examples:>8}  {x.excluded:>8}  {x.shards:>6}  {x.shards_done:>4}  "
            f"{_num(x.forwards):>13}  {_num(x.seconds):>13}" for x in lines]
    todo = [x for x in lines if x.shards_done < x.shards]
    if not todo:
        tail = "nothing to run: every shard is complete"
    elif all(x.forwards is not None for x in todo):
        total_s = sum(x.seconds or 0.0 for x in todo)
        tail = (f"estimate: {_num(sum(x.forwards or 0.0 for x in todo))} forwards, {total_s:,.0f} s of decoding "
                f"(≈ {total_s / max(grid.workers, 1):,.0f} s on {grid.workers} model actor(s)); cost model "
                f"fitted on {cost.n_rows} rows under {cost.source}")
    else:
        missing = sorted({x.label.split(" / ")[0] for x in todo if x.forwards is None})
        tail = (f"no estimate for {', '.join(missing)}: {cost.source} has no rows of "
                f"{'that model' if len(missing) == 1 else 'those models'} with cell settings yet")
    pinned = [f"checkpoint {m}: snapshot {c} (pre-flight passed; the actors load this commit)"
              for m, c in plan.snapshots.items() if c]
    notes = [f"resources: {n}" for n in plan.resource_notes]
    return "\n".join([head, *body, "", tail, *pinned, *notes])
