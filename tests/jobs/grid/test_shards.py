"""Cells, shards, stable shard ids and the seeded balanced run order."""

from __future__ import annotations

import dataclasses

from jobs.grid.shards import Cell, balanced_order, expand_cells, expand_shards, stable_hash
from streamgen.config import BenchmarkConfig, GridConfig, ModelConfig, TypingConfig

MODELS = {
    "ar": ModelConfig(name="ar", family="autoregressive", source="tiny", tiny_arch="llama"),
    "bi": ModelConfig(name="bi", family="bidirectional", source="tiny", tiny_arch="llada"),
}
BENCHES = {
    "b1": BenchmarkConfig(name="b1", version="1", module="m", data_file="x", max_new_tokens=32),
    "b2": BenchmarkConfig(name="b2", version="1", module="m", data_file="y", max_new_tokens=64),
}
IDS = {"b1": [f"e{i}" for i in range(7)], "b2": ["a", "b", "c"]}


def _grid(**kw: object) -> GridConfig:
    base = dict(models=["ar", "bi"], benchmarks=["b1", "b2"], acceptance=["greedy", "threshold"],
                taus=[0.5, 0.9], verifier_modes=["visible", "hidden"], shard_size=3)
    return GridConfig(**{**base, **kw})  # type: ignore[arg-type]


def _shards(grid: GridConfig, models=MODELS, benches=BENCHES):  # type: ignore[no-untyped-def]
    return expand_shards(expand_cells(grid, models, benches), IDS, shard_size=grid.shard_size, seed=grid.seed)


def test_cells_cover_the_grid_once() -> None:
    cells = expand_cells(_grid(), MODELS, BENCHES)
    # ar: 2 benchmarks × 3 rules; bi: 2 × 3 × 2 verifier modes
    assert len(cells) == 6 + 12
    assert len({c.cell_id for c in cells}) == len(cells)
    assert {c.tau for c in cells if c.acceptance == "greedy"} == {None}
    assert {c.verifier_mode for c in cells if c.model.name == "ar"} == {None}
    assert {c.max_new_tokens for c in cells if c.benchmark.name == "b2"} == {64}
    assert {c.max_new_tokens for c in expand_cells(_grid(max_new_tokens=16), MODELS, BENCHES)} == {16}


def test_shards_partition_each_cells_examples() -> None:
    shards = _shards(_grid())
    assert len({s.shard_id for s in shards}) == len(shards)
    by_cell: dict[str, list[str]] = {}
    for s in shards:
        assert 1 <= len(s) <= 3
        by_cell.setdefault(s.cell.cell_id, []).extend(s.example_ids)
    for cell_id, ids in by_cell.items():
        bench = next(s.cell.benchmark.name for s in shards if s.cell.cell_id == cell_id)
        assert ids == IDS[bench]


def test_shard_ids_are_stable_and_change_with_what_changes_results() -> None:
    ids = [s.shard_id for s in _shards(_grid())]
    assert ids == [s.shard_id for s in _shards(_grid())]  # deterministic across calls
    changed = {
        "tau": _shards(_grid(taus=[0.5, 0.8])),
        "max_new_tokens": _shards(_grid(max_new_tokens=7)),
        "seed": _shards(_grid(seed=1)),
        "revision": _shards(_grid(), models={**MODELS, "ar": dataclasses.replace(MODELS["ar"], revision="r2")}),
        "data version": _shards(_grid(), benches={**BENCHES, "b1": dataclasses.replace(BENCHES["b1"], version="2")}),
        "decode settings": _shards(_grid(), models={**MODELS, "ar": dataclasses.replace(MODELS["ar"], decoding={"k": 1})}),
        "granularity": _shards(_grid(granularity="word")),
        "chunk size": _shards(_grid(granularity="chars", segment_chars=20)),
        "live": _shards(_grid(typing=TypingConfig(chars_per_s=[10.0], live_policy="latest"))),
    }
    for what, shards in changed.items():
        assert set(ids) != {s.shard_id for s in shards}, what
    # Adding a τ keeps the ids of the unchanged cells: their files are reused on resume.
    more = {s.shard_id for s in _shards(_grid(taus=[0.5, 0.9, 0.7]))}
    assert set(ids) < more


def test_default_timing_leaves_the_cell_identity_as_it_was() -> None:
    """Sentence segments replayed back to back: no timing key, so ids change only with the schema."""
    for cell in expand_cells(_grid(typing=TypingConfig(chars_per_s=[1.0, 2.0])), MODELS, BENCHES):
        assert "segmentation" not in cell.identity() and "live" not in cell.identity()
        assert cell.live is None and cell.segmentation == "sentence"
    live = expand_cells(_grid(granularity="chars", segment_chars=9,
                              typing=TypingConfig(chars_per_s=[10.0], live_policy="every")), MODELS, BENCHES)
    assert {c.segmentation for c in live} == {"chars:9"} and {c.live.live_policy for c in live} == {"every"}


def test_schema_version_is_part_of_the_id(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import streamgen.results.cells as cells_mod

    before = {s.shard_id for s in _shards(_grid())}
    monkeypatch.setattr(cells_mod, "SCHEMA_VERSION", 999)
    assert before.isdisjoint({s.shard_id for s in _shards(_grid())})


def test_run_order_is_balanced_seeded_and_recorded_per_shard() -> None:
    cell = expand_cells(_grid(), MODELS, BENCHES)[0]
    ids = [f"x{i}" for i in range(41)]
    order = balanced_order(cell, ids, seed=3)
    assert abs(sum(order) - (len(ids) - sum(order))) <= 1
    assert order == balanced_order(cell, ids, seed=3)
    assert any(balanced_order(cell, ids, seed=s) != order for s in range(4, 8))
    for s in _shards(_grid()):
        assert len(s.base_first) == len(s.example_ids)


def test_stable_hash_ignores_key_order() -> None:
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})
    assert isinstance(Cell, type)
