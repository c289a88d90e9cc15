"""A row context for tests that build rows without a grid: a real cell from the configs."""

from __future__ import annotations

from jobs.run.rows import RowContext
from streamgen.acceptance_rules import make_rule
from streamgen.config import TypingConfig, benchmark_config, model_config
from streamgen.results.cells import Cell


def row_context(model: str = "tiny-llama", benchmark: str = "humaneval", acceptance: str = "greedy",
                tau: float | None = None, *, live: TypingConfig | None = None, shard_id: str = "s1",
                thresholds: tuple[float | None, float | None] = (None, None)) -> RowContext:
    """The rows' context for one (model, benchmark, acceptance/τ) cell, run "r1" on the CPU."""
    cell = Cell(model_config(model), benchmark_config(benchmark), make_rule(acceptance, {"tau": tau}), None, 16,
                live=live)
    return RowContext(cell, "r1", shard_id, "test", device="cpu", thresholds=thresholds)
