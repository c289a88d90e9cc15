"""Shard result files: atomic writes, validation on resume, damaged files detected and removed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.grid.shards import expand_cells, expand_shards
from jobs.run.writer import ResultWriter
from streamgen.config import BenchmarkConfig, GridConfig, ModelConfig
from streamgen.results.records import SCHEMA_VERSION, PairRecord, StepRecord, arrow_schema

MODEL = ModelConfig(name="tiny-llama", source="tiny", tiny_arch="llama")
BENCH = BenchmarkConfig(name="mbpp", version="1", module="mbpp", data_file="x")


def _shard():  # type: ignore[no-untyped-def]
    grid = GridConfig(models=["tiny-llama"], benchmarks=["mbpp"], shard_size=3)
    cells = expand_cells(grid, {"tiny-llama": MODEL}, {"mbpp": BENCH})
    return expand_shards(cells, {"mbpp": ["1", "2", "3"]}, shard_size=3, seed=0)[0]


def _pair(shard, example_id: str) -> PairRecord:  # type: ignore[no-untyped-def]
    values = {f.name: None for f in dataclasses.fields(PairRecord)}
    values.update(run_id="r", shard_id=shard.shard_id, cell_id=shard.cell.cell_id, model="tiny-llama",
                  family="autoregressive", benchmark="mbpp", benchmark_version="1", acceptance="greedy",
                  example_id=example_id, n_segments=2, device="cpu", schema_version=SCHEMA_VERSION,
                  code_version="test", base_forwards=5, residual_forwards=1)
    return PairRecord(**values)


def _step(shard, example_id: str, step: int) -> StepRecord:  # type: ignore[no-untyped-def]
    return StepRecord("r", shard.shard_id, shard.cell.cell_id, "tiny-llama", "mbpp", "greedy", None, example_id,
                      step, step == 2, 10 * step, 3, 2, 1, 2, 7, 0.1, 0.05, None, SCHEMA_VERSION, "test")


def _write(tmp_path: Path):  # type: ignore[no-untyped-def]
    shard, writer = _shard(), ResultWriter(tmp_path)
    pairs = [_pair(shard, e) for e in shard.example_ids]
    steps = [_step(shard, e, i) for e in shard.example_ids for i in (1, 2)]
    return shard, writer, writer.write_shard(shard, pairs, steps)


def test_layout_and_round_trip(tmp_path: Path) -> None:
    shard, writer, paths = _write(tmp_path)
    assert paths.pairs == tmp_path / "pairs/model=tiny-llama/benchmark=mbpp" / f"{shard.shard_id}.parquet"
    assert paths.steps == tmp_path / "steps/model=tiny-llama/benchmark=mbpp" / f"{shard.shard_id}.parquet"
    table = pq.read_table(paths.pairs)
    assert table.schema.equals(arrow_schema(PairRecord), check_metadata=False)
    assert sorted(table.column("example_id").to_pylist()) == ["1", "2", "3"]
    assert pq.read_table(paths.steps).num_rows == 6
    assert writer.is_done(shard)
    assert not list(tmp_path.rglob("*.tmp*")), "temporary files left behind"


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_damaged_pairs_file_is_detected_and_removed(tmp_path: Path, damage: str) -> None:
    shard, writer, paths = _write(tmp_path)
    data = paths.pairs.read_bytes()
    paths.pairs.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"x" * len(data), "empty": b""}[damage])
    assert not writer.is_done(shard)
    assert not paths.pairs.exists() and not paths.steps.exists()


def test_damaged_steps_file_is_detected(tmp_path: Path) -> None:
    shard, writer, paths = _write(tmp_path)
    paths.steps.write_bytes(paths.steps.read_bytes()[:-20])
    assert not writer.is_done(shard)
    assert not paths.pairs.exists()


def test_steps_without_pairs_means_unfinished(tmp_path: Path) -> None:
    shard, writer, paths = _write(tmp_path)
    paths.pairs.unlink()
    assert not writer.is_done(shard)
    assert not paths.steps.exists()


def test_a_file_with_missing_examples_is_not_done(tmp_path: Path) -> None:
    shard, writer, paths = _write(tmp_path)
    table = pq.read_table(paths.pairs)
    pq.write_table(table.slice(0, 2), paths.pairs)  # a valid Parquet file, but one example short
    assert not writer.is_done(shard)


def test_writer_refuses_rows_that_do_not_match_the_shard(tmp_path: Path) -> None:
    shard, writer = _shard(), ResultWriter(tmp_path)
    with pytest.raises(ValueError, match="refusing"):
        writer.write_shard(shard, [_pair(shard, "1"), _pair(shard, "1"), _pair(shard, "2")], [])
    assert not any(tmp_path.rglob("*.parquet"))
