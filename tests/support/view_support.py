"""A small real results directory for the viewer's tests: scripted AR models (kept whole / nothing / k
tokens by design) on CoEdIT through the grid's own path (plan → in-process actor → scoring → writer),
no Ray; plus one error row written through the row builder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from jobs.grid.plan import GridPlan, plan_grid
from jobs.run.actors import ModelActor
from jobs.run.rows import error_rows, score_shard, shard_context
from jobs.run.writer import ResultWriter
from streamgen.config import grid_config
from streamgen.results.records import PairRecord, to_table, write_parquet_atomic

MODELS = ("scripted-ar-prefix", "scripted-ar-constant", "scripted-ar-lastsegment")
ERROR_EXAMPLE = "broken/1"


def scripted_plan(root: Path, limit: int = 3, overrides: Sequence[str] = ()) -> GridPlan:
    """The scripted grid's plan for ``root`` (``overrides``: more ``key=value`` fields, e.g. corrections)."""
    return plan_grid(grid_config("scripted", [f"models=[{','.join(MODELS)}]", f"limit={limit}",
                                              f"results_dir={root}", *overrides]))


def scripted_results(root: Path, limit: int = 3, overrides: Sequence[str] = ()) -> Path:
    """Write the results directory under ``root``; returns it."""
    plan = scripted_plan(root, limit, overrides)
    writer = ResultWriter(root)
    for model in MODELS:
        actor = ModelActor(plan.models[model])
        for shard in (s for s in plan.shards if s.model_name == model):
            task = plan.task(shard, "run-1", "test")
            rows = score_shard(task, actor.run_shard(task))
            writer.write_shard(shard, rows.pairs, rows.steps)
    task = plan.task(plan.shards[0], "run-1", "test")
    error = error_rows(shard_context(task, "cpu"), ERROR_EXAMPLE, 3, RuntimeError("verifier crashed")).pair
    write_parquet_atomic(to_table([error], PairRecord), root / "pairs" / "extra" / "error.parquet")
    return root
