"""Shared work across acceptance cells (jobs/grid/units.py, streamgen/shared_example.py): one base run and one
first stream step per example serve every (acceptance, τ) cell, and the rows are those of separate runs.

Scripted ``calibrated`` models of all four families (streamgen/models/scripted.py: answer probabilities
0.99, 0.95, 0.8, 0.6, 0.3, …), so greedy, τ=0.5 and τ=0.9 keep different draft lengths and the cells'
streams diverge after the shared first step. The actor runs in-process (no Ray); the rows come from
the CPU worker's own builder (``jobs.run.rows.score_unit``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from bench.compare_results import comparable
from jobs.grid.plan import GridPlan, plan_grid
from jobs.grid.units import group_shards
from jobs.run.actors import ModelActor
from jobs.run.rows import ShardRows, score_unit
from streamgen.acceptance_rules import column_param
from streamgen.config import grid_config
from tests.support.forward_count import predicted_forwards_executed

MODELS = ["scripted-ar-calibrated", "scripted-refusion-calibrated", "scripted-llada-calibrated",
          "scripted-dgemma-calibrated"]
TAUS = (0.5, 0.9)


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> GridPlan:
    out = tmp_path_factory.mktemp("shared")
    return plan_grid(grid_config("scripted", [f"models=[{','.join(MODELS)}]", "acceptance=[greedy,threshold]",
                                              f"taus=[{','.join(map(str, TAUS))}]", "limit=3", "shard_size=2", "granularity=chars", "segment_chars=60",
                                              f"results_dir={out}"]))


@dataclasses.dataclass(frozen=True)
class Run:
    rows: list[ShardRows]
    forwards_executed: int


def _run(plan: GridPlan, share: bool) -> Run:
    """Every shard of the plan, decoded unit by unit on one in-process actor per model, scored into rows."""
    rows: list[ShardRows] = []
    executed = 0
    for model in MODELS:
        actor = ModelActor(plan.models[model])
        for unit in group_shards([s for s in plan.shards if s.model_name == model], share=share):
            tasks = tuple(dataclasses.replace(plan.task(s, f"run-{share}", "test"), share_work=share) for s in unit)
            decoded = actor.run_unit(tasks)
            executed += sum(d.forwards_executed for d in decoded)
            rows.extend(score_unit(tasks, decoded))
    return Run(rows, executed)


@pytest.fixture(scope="module")
def runs(plan: GridPlan) -> dict[bool, Run]:
    return {share: _run(plan, share) for share in (True, False)}


def _table(run: Run, kind: str) -> dict[tuple, dict[str, Any]]:
    records = [r for rows in run.rows for r in getattr(rows, kind)]
    key = ("shard_id", "example_id") + (("step",) if kind == "steps" else ())
    return {tuple(getattr(r, k) for k in key): comparable(dataclasses.asdict(r)) for r in records}


def test_units_group_the_acceptance_cells_of_one_example_chunk(plan: GridPlan) -> None:
    units = group_shards(plan.shards, share=True)
    cells_per_unit = 1 + len(TAUS)  # greedy + each τ
    assert len(units) == len(plan.shards) // cells_per_unit == len(MODELS) * 2  # 3 examples, shards of 2
    for unit in units:
        assert len(unit) == cells_per_unit
        assert {s.example_ids for s in unit} == {unit[0].example_ids}
        assert {(s.cell.acceptance, s.cell.tau) for s in unit} == {("greedy", None), *(("threshold", t) for t in TAUS)}
    assert group_shards(plan.shards, share=False) == [(s,) for s in plan.shards]


def test_rows_with_sharing_equal_rows_without(runs: dict[bool, Run]) -> None:
    for kind in ("pairs", "steps"):
        shared, separate = _table(runs[True], kind), _table(runs[False], kind)
        assert shared.keys() == separate.keys() and shared
        for key in separate:
            assert shared[key] == separate[key], (kind, key)
    pairs = list(_table(runs[False], "pairs").values())
    assert {p["error_type"] for p in pairs} == {None}
    # the path under test: the cells' streams diverge after the shared step 1 (different kept lengths)
    for model in MODELS:
        kept = {(p["acceptance"], p["tau"]): p["accepted_tokens_final"] for p in pairs if p["model"] == model}
        assert len(set(kept.values())) > 1, (model, kept)
    assert max(p["n_segments"] for p in pairs) >= 3  # at least one fork advances past step 2
    assert {p["run_order"] for p in pairs} == {"base_first", "stream_first"}


def test_forwards_executed_match_the_design(runs: dict[bool, Run]) -> None:
    for share, run in runs.items():
        pairs = [dataclasses.asdict(p) for rows in run.rows for p in rows.pairs if p.base_forwards is not None]
        steps = [dataclasses.asdict(s) for rows in run.rows for s in rows.steps]
        assert run.forwards_executed == predicted_forwards_executed(pairs, steps, share=share), share
    assert runs[True].forwards_executed < runs[False].forwards_executed


def test_each_cells_recorded_run_order_is_what_ran(plan: GridPlan, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per example: the stream runs of the stream-first cells, the one base run, then the stream runs of
    the base-first cells; so each cell's pairs.run_order says truly whether its stream ran before the base."""
    from streamgen import shared_example as shared

    events: list[str] = []
    base_run, stream = shared.SharedExample._base_run, shared.SharedExample._stream

    def spy_base(self: Any, done: Any) -> Any:
        events.append("base" if self._base is None else "base (shared)")
        return base_run(self, done)

    def spy_stream(self: Any, index: int, done: Any) -> Any:
        rule = self.cells[index].rule
        events.append(f"stream {rule.name} {column_param(rule, 'tau')}")
        return stream(self, index, done)

    monkeypatch.setattr(shared.SharedExample, "_base_run", spy_base)
    monkeypatch.setattr(shared.SharedExample, "_stream", spy_stream)
    actor, reordered = ModelActor(plan.models[MODELS[0]]), 0
    for unit in group_shards([s for s in plan.shards if s.model_name == MODELS[0]], share=True):
        tasks = tuple(plan.task(s, "run", "test") for s in unit)
        actor.run_unit(tasks)
        for i in range(len(unit[0])):
            per_example, events[:] = events[: 2 * len(unit)], events[2 * len(unit):]
            orders = [t.examples[i].base_first for t in tasks]
            expected: list[str] = []
            for t in sorted(tasks, key=lambda t: t.examples[i].base_first):  # stable: the unit's order within each
                run = [f"stream {t.cell.acceptance} {t.cell.tau}", "base?"]
                expected += run if not t.examples[i].base_first else run[::-1]
            expected = [e if e != "base?" else "base (shared)" for e in expected]
            expected[expected.index("base (shared)")] = "base"  # the first to ask runs it
            assert per_example == expected, (i, per_example)
            reordered += orders != sorted(orders)  # a base-first cell precedes a stream-first one in the unit
    assert not events
    assert reordered, "no example had a base-first cell before a stream-first one: the reordering was not exercised"


def test_a_pair_that_raises_keeps_the_model_calls_it_made(plan: GridPlan, monkeypatch: pytest.MonkeyPatch) -> None:
    """An example whose stream raises after running is an error row, and ``forwards_executed`` still holds
    the calls made before the raise: its base run if that ran first, plus every stream step it took."""
    from streamgen import shared_example as shared

    base_run, stream = shared.SharedExample._base_run, shared.SharedExample._stream
    ran: dict[str, list[int]] = {}

    def spy_base(self: Any, done: Any) -> Any:
        base, done = base_run(self, done)
        ran.setdefault(self.request.example_id, []).append(base.forwards)
        return base, done

    def raising_stream(self: Any, index: int, done: Any) -> Any:
        steps, done = stream(self, index, done)
        ran.setdefault(self.request.example_id, []).extend(s.answer.forwards for s in steps)
        raise RuntimeError("raised after the stream ran")

    monkeypatch.setattr(shared.SharedExample, "_base_run", spy_base)
    monkeypatch.setattr(shared.SharedExample, "_stream", raising_stream)
    actor = ModelActor(plan.models[MODELS[0]])
    shard = next(s for s in plan.shards if s.model_name == MODELS[0])
    [decoded] = actor.run_unit((plan.task(shard, "run", "test"),))
    failed = [r for r in decoded.results if r.error_type is not None]
    assert {r.error_type for r in failed} == {"RuntimeError"} and len(failed) == len(decoded.results) >= 2
    assert {r.base_first for r in failed} == {True, False}  # both orders taken: with and without the base run
    for r in failed:
        expected = sum(ran[r.example_id])  # stream-first: the base never ran (the stream raised first)
        assert len(ran[r.example_id]) >= (3 if r.base_first else 2)  # base + ≥ 2 steps, or ≥ 2 steps
        assert r.forwards_executed == expected > 0, r.example_id
        assert r.forward_wall_s > 0
    assert decoded.forwards_executed == sum(sum(v) for v in ran.values())


def test_a_model_call_outside_every_run_is_an_accounting_error(plan: GridPlan,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The pair's runs and the decoder's meter must agree on the calls made. A family that calls the model
    outside the spans its runs are counted from (here: one extra metered call after each base run) gets
    error rows that say so, whose ``forwards_executed`` holds every call the meter saw."""
    from streamgen import shared_example as shared

    base_run = shared.SharedExample._base_run
    counted: dict[str, int] = {}

    def base_then_a_stray_call(self: Any, done: Any) -> Any:
        fresh = self._base is None
        base, done = base_run(self, done)
        if fresh:
            with self.decoder.meter.call("stray", 1):
                pass
        counted[self.request.example_id] = base.forwards
        return base, done

    monkeypatch.setattr(shared.SharedExample, "_base_run", base_then_a_stray_call)
    actor = ModelActor(plan.models[MODELS[0]])
    shard = next(s for s in plan.shards if s.model_name == MODELS[0])
    [decoded] = actor.run_unit((plan.task(shard, "run", "test"),))
    assert counted and all(n > 0 for n in counted.values())  # the base runs ran, then the stray call
    assert {r.error_type for r in decoded.results} == {"AccountingError"}
    for r in decoded.results:
        assert "meter counted" in (r.error_traceback or "")
        assert r.forwards_executed > counted[r.example_id]  # base + stream steps + the stray call
