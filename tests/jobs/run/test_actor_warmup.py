"""The model actor's untimed warm-up pair (jobs/run/actors.py, streamgen/warmup.py): once per actor, before its
first timed pair, on no row and in no forward count; a grid option that enters no shard id or fingerprint.

Scripted models (autoregressive and LLaDA-style), the actor in-process (no Ray), as tests/jobs/run/test_shared_work.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobs.grid.plan import GridPlan, plan_grid
from jobs.grid.shard_tasks import DecodedShard
from jobs.grid.units import group_shards
from jobs.run.actors import ModelActor
from streamgen import shared_example as shared
from streamgen import warmup
from streamgen.config import grid_config

MODELS = ["scripted-ar-calibrated", "scripted-llada-calibrated"]


def _plan(out: Any, *extra: str) -> GridPlan:
    return plan_grid(grid_config("scripted", [f"models=[{','.join(MODELS)}]", "acceptance=[greedy,threshold]",
                                              "taus=[0.9]", "limit=3", "shard_size=2", "granularity=chars",
                                              "segment_chars=60", f"results_dir={out}", *extra]))


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> GridPlan:
    return _plan(tmp_path_factory.mktemp("warmup"))


def _decode(plan: GridPlan, model: str, *, warm_up: bool) -> tuple[ModelActor, list[DecodedShard]]:
    actor = ModelActor(plan.models[model], warm_up=warm_up)
    decoded = []
    for unit in group_shards([s for s in plan.shards if s.model_name == model], share=True):
        decoded.extend(actor.run_unit(tuple(plan.task(s, "run", "test") for s in unit)))
    return actor, decoded


def _counts(decoded: list[DecodedShard]) -> dict[tuple[str, str], tuple[int, ...]]:
    out = {}
    for d in decoded:
        for r in d.results:
            assert r.outcome is not None, r.error_traceback
            steps = tuple(s.answer.forwards for s in r.outcome.steps)
            out[(d.shard_id, r.example_id)] = (r.forwards_executed, r.outcome.base.forwards, *steps)
    return out


@pytest.mark.parametrize("model", MODELS)
def test_warm_up_runs_once_per_actor_first_and_changes_no_count(plan: GridPlan, model: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    warm_pair, timed_pair = warmup.run_pair, shared.SharedExample.pair

    def spy_warm(*args: Any, **kw: Any) -> Any:
        events.append("warm-up")
        return warm_pair(*args, **kw)

    def spy_timed(self: Any, *args: Any, **kw: Any) -> Any:
        events.append("pair")
        return timed_pair(self, *args, **kw)

    monkeypatch.setattr(warmup, "run_pair", spy_warm)
    monkeypatch.setattr(shared.SharedExample, "pair", spy_timed)
    warm, decoded = _decode(plan, model, warm_up=True)
    units = len(group_shards([s for s in plan.shards if s.model_name == model], share=True))
    assert units >= 2  # the path: several units on one actor, so "once per actor" is not "once per unit"
    assert events[0] == "warm-up" and events.count("warm-up") == 1 and events.count("pair") > 1
    assert warm.warmup is not None and warm.warmup.pairs == 1 and warm.warmup.forwards > 0

    # the warm-up's calls went through the same decoder's meter, and into no pair's count
    executed = sum(d.forwards_executed for d in decoded)
    metered = sum(dec.meter.reading().forwards for dec in warm._decoders.values())
    assert metered == executed + warm.warmup.forwards

    events.clear()
    cold, cold_decoded = _decode(plan, model, warm_up=False)
    assert cold.warmup is None and "warm-up" not in events
    assert _counts(decoded) == _counts(cold_decoded)  # every pair's and step's forwards, exactly


def test_warm_up_is_a_grid_option_outside_ids_and_fingerprints(tmp_path: Any) -> None:
    on, off = _plan(tmp_path / "on"), _plan(tmp_path / "off", "warm_up=false")
    assert on.grid.warm_up is True and off.grid.warm_up is False  # default on
    assert [s.shard_id for s in on.shards] == [s.shard_id for s in off.shards]
    assert [s.cell.fingerprint for s in on.shards] == [s.cell.fingerprint for s in off.shards]
