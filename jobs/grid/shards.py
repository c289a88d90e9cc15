"""Grid → cells → shards, with stable shard ids (docs/design.md, 'Data flow').

A **cell** (``streamgen.results.cells.Cell``, built here once per grid combination) is (model, benchmark,
acceptance rule/τ, verifier mode, decode settings); a **shard** is a cell × a chunk of example ids.
A shard id is a hash of everything that changes the shard's rows: the full model spec (weights source, revision, decode settings), the full benchmark config (its data
version, prompt, scoring), acceptance and τ, max_new_tokens, the example ids, the run-order seed and
``SCHEMA_VERSION``. Renaming nothing else changes it; changing any of those gives a new id, so stale
files are never reused and unchanged ones are never recomputed.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from streamgen.acceptance_rules import AcceptanceRule, column_param, sweep
from streamgen.config import VERIFIER_MODE_FAMILIES, BenchmarkConfig, GridConfig, ModelConfig, rule_values
from streamgen.results.cells import HASH_CHARS, Cell, numerics_settings, stable_hash

__all__ = ["HASH_CHARS", "Cell", "Shard", "acceptance_rules", "balanced_order", "expand_cells", "expand_shards",
           "size_key", "stable_hash"]


@dataclass(frozen=True)
class Shard:
    """A cell × a chunk of its example ids, with the run order of each example (base first or not)."""

    cell: Cell
    example_ids: tuple[str, ...]
    base_first: tuple[bool, ...]  # per example, from the seeded balanced order of the whole cell
    seed: int

    @functools.cached_property  # the shard is frozen; the study grid's planning asks ~70,000 times
    def shard_id(self) -> str:
        return stable_hash({"cell": self.cell.identity(), "example_ids": list(self.example_ids),
                            "base_first": list(self.base_first), "seed": self.seed})

    @property
    def model_name(self) -> str:
        return self.cell.model.name

    def __len__(self) -> int:
        return len(self.example_ids)


def acceptance_rules(grid: GridConfig) -> list[AcceptanceRule]:
    """The grid's acceptance cells' rules, in order: per listed rule, its sweep over the grid's values
    (``streamgen.acceptance_rules.sweep``: one threshold per τ; greedy, then one greedy per tie guard)."""
    values = rule_values(grid)
    return [rule for name in grid.acceptance for rule in sweep(name, values)]


def expand_cells(grid: GridConfig, models: Mapping[str, ModelConfig],
                 benchmarks: Mapping[str, BenchmarkConfig]) -> list[Cell]:
    """All cells of the grid, in a stable order (model, benchmark, acceptance, τ, verifier mode)."""
    rules = acceptance_rules(grid)
    cells: list[Cell] = []
    segmentation = grid.granularity if grid.granularity != "chars" else f"chars:{grid.segment_chars}"
    live = grid.typing if grid.typing.live_policy is not None else None
    corrections = grid.corrections if grid.corrections.enabled else None
    for m in grid.models:
        model = models[m]
        modes: list[str | None] = list(grid.verifier_modes) if model.family in VERIFIER_MODE_FAMILIES else [None]
        for b in grid.benchmarks:
            bench = benchmarks[b]
            max_new = grid.max_new_tokens if grid.max_new_tokens is not None else bench.max_new_tokens
            for rule in rules:
                numerics = numerics_settings(column_param(rule, "tie_guard"))
                cells.extend(Cell(model, bench, rule, mode, int(max_new), grid.limit, segmentation, live, numerics,
                                  corrections)
                             for mode in modes)
    return cells


def balanced_order(cell: Cell, example_ids: Sequence[str], seed: int) -> list[bool]:
    """Seeded per-example run order for a cell: half base-first, half stream-first (±1), shuffled.

    Depends only on (seed, cell, example ids), so a resumed run reproduces it exactly.
    """
    n = len(example_ids)
    order = [i % 2 == 0 for i in range(n)]
    rng = random.Random(stable_hash({"seed": seed, "cell": cell.cell_id, "ids": list(example_ids)}))
    rng.shuffle(order)
    return order


def size_key(cell: Cell) -> str:
    """What a per-cell shard size is keyed by: (model, benchmark), so every acceptance cell and verifier
    mode of them is cut alike and their shards still form shared work units."""
    return f"{cell.model.name}/{cell.benchmark.name}"


def expand_shards(cells: Sequence[Cell], example_ids: Mapping[str, Sequence[str]], *,
                  shard_size: int | Mapping[str, int], seed: int) -> list[Shard]:
    """Cut each cell's examples (``example_ids[benchmark name]``) into shards of ``shard_size`` examples,
    or of ``shard_size[size_key(cell)]`` (``shard_size: auto``, jobs/grid/unit_sizing.py)."""
    shards = []
    for cell in cells:
        size = shard_size if isinstance(shard_size, int) else shard_size[size_key(cell)]
        if size < 1:
            raise ValueError(f"shard_size={size} must be ≥ 1")
        ids = list(example_ids[cell.benchmark.name])
        order = balanced_order(cell, ids, seed)
        for start in range(0, len(ids), size):
            chunk = slice(start, start + size)
            shards.append(Shard(cell, tuple(ids[chunk]), tuple(order[chunk]), seed))
    return shards
