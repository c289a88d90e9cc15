"""ReFusion's per-benchmark thresholds are applied where the actor builds a (model, benchmark) decoder,
change what is decoded, and land in the rows (``pairs.slot_threshold`` / ``pairs.token_threshold``)."""

from __future__ import annotations

from jobs.run.rows import outcome_rows, shard_context
from streamgen.acceptance_rules import Greedy
from streamgen.benchmarks import Example
from streamgen.config import benchmark_config, model_config
from streamgen.results.cells import Cell
from streamgen.stream import StreamRequest

REQ = StreamRequest("e1", (), ("Write a function that adds two numbers. ", "Use type hints."))


def test_per_benchmark_thresholds_reach_the_decoder_and_the_rows() -> None:
    from jobs.grid.shard_tasks import ExampleTask, ShardTask
    from jobs.grid.shards import Shard
    from jobs.run.actors import ModelActor

    # scripted calibrated: position 3 has probability 0.6, so τ_tok 0.7 sends its slot to the infill path
    cfg = model_config("scripted-refusion-calibrated", ["decoding.per_benchmark.coedit.token_threshold=0.7"])
    actor = ModelActor(cfg)
    def task(bench: str) -> ShardTask:
        shard = Shard(Cell(cfg, benchmark_config(bench), Greedy(), None, 16), ("e1",), (True,), 0)
        return ShardTask(shard, "r", "t", (ExampleTask(Example("coedit", "e1", (), REQ.text, "", {}), REQ, True, 2),))

    shards = {b: actor.run_shard(task(b)) for b in ("coedit", "mbpp")}
    assert shards["coedit"].thresholds == (1.0, 0.7) and shards["mbpp"].thresholds == (1.0, 0.4)
    assert actor._decoder(benchmark_config("coedit"), None, 16).settings.token_threshold == 0.7
    base = {b: s.results[0].outcome.base for b, s in shards.items()}
    assert base["coedit"].token_ids == base["mbpp"].token_ids  # same answer, other cost:
    assert base["coedit"].forwards > base["mbpp"].forwards  # the override sent a slot to the infill path
    ctx = shard_context(task("coedit"), "cpu", None, shards["coedit"].thresholds)
    pair = outcome_rows(shards["coedit"].results[0].outcome, ctx).pair
    assert (pair.slot_threshold, pair.token_threshold) == (1.0, 0.7)
