"""Each distinct stream step computed once (streamgen/stream_tree.py, streamgen/shared_example.py): a τ sweep
(greedy and τ 0.3, 0.5, 0.7, 0.9; both verifier modes) on tiny and calibrated scripted models of every
family records byte-identical rows with ``share_work`` on and off, and executes at most a third of the
forwards it records.

The expected counts come from ``tests/forward_count.predicted_forwards_executed``, a deliberately simple
reference written from the rows (one computation per distinct path to a step; LLaDA/Dream: one decode
per request prefix). The trees' own records (which cells shared each step, where they forked, which
decodes were reused) are asserted too, so the test fails if the shared path is never taken.
"""

from __future__ import annotations

import dataclasses
import io
from collections import defaultdict
from typing import Any

import pyarrow.parquet as pq
import pytest

from jobs.grid.plan import plan_grid
from jobs.grid.units import group_shards
from jobs.run.actors import ModelActor
from jobs.run.rows import ShardRows, score_unit
from streamgen.config import grid_config
from streamgen.decoding.memo import DecodeMemo
from streamgen.results.records import PairRecord, StepRecord, to_table
from streamgen.stream_tree import StreamTree
from tests.support.forward_count import predicted_forwards_executed

FAMILIES = {"autoregressive": ["tiny-llama", "scripted-ar-calibrated"],
            "refusion": ["tiny-refusion", "scripted-refusion-calibrated"],
            "llada": ["tiny-llada", "scripted-llada-calibrated"],
            "dream": ["tiny-dream", "scripted-dream-calibrated"],
            "diffusion_gemma": ["tiny-diffusiongemma", "scripted-dgemma-calibrated"]}
MODELS = [m for ms in FAMILIES.values() for m in ms]
TAUS = (0.3, 0.5, 0.7, 0.9)
RULES = 1 + len(TAUS)  # greedy + each τ
RUN_LEVEL = {"run_id", "code_version", "actor_id"}  # differ between any two runs; walls are measured


@dataclasses.dataclass
class Sweep:
    rows: dict[str, list[ShardRows]]  # by model
    executed: dict[str, int]
    trees: dict[str, list[StreamTree]]
    memos: dict[str, list[DecodeMemo]]


def _sweep(share: bool, tmp: Any, monkeypatch: pytest.MonkeyPatch) -> Sweep:
    from streamgen import shared_example as shared

    plan = plan_grid(grid_config("scripted", [
        f"models=[{','.join(MODELS)}]", "acceptance=[greedy,threshold]", f"taus=[{','.join(map(str, TAUS))}]",
        "limit=2", "shard_size=8", "verifier_modes=[visible,hidden]", f"share_work={str(share).lower()}",
        f"results_dir={tmp}"]))
    out = Sweep(defaultdict(list), defaultdict(int), defaultdict(list), defaultdict(list))
    run, init = StreamTree.run, shared.SharedExample.__init__
    model = ""

    def spy_run(self: StreamTree) -> None:
        run(self)
        out.trees[model].append(self)

    def spy_init(self: Any, *args: Any, **kw: Any) -> None:
        init(self, *args, **kw)
        if self.memo is not None:
            out.memos[model].append(self.memo)

    monkeypatch.setattr(StreamTree, "run", spy_run)
    monkeypatch.setattr(shared.SharedExample, "__init__", spy_init)
    for model in MODELS:
        actor = ModelActor(plan.models[model], warm_up=False)
        for unit in group_shards([s for s in plan.shards if s.model_name == model], share=share):
            tasks = tuple(plan.task(s, f"run-{share}", f"code-{share}") for s in unit)
            decoded = actor.run_unit(tasks)
            out.executed[model] += sum(d.forwards_executed for d in decoded)
            out.rows[model].extend(score_unit(tasks, decoded))
    monkeypatch.undo()
    return out


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Sweep]:
    with pytest.MonkeyPatch.context() as mp:
        return {share: _sweep(share, tmp_path_factory.mktemp(f"share{share}"), mp) for share in (True, False)}


def _parquet(rows: list[ShardRows], kind: str) -> bytes:
    """The rows as one Parquet file, sorted by their key, run-level fields and measured walls blanked."""
    record = PairRecord if kind == "pairs" else StepRecord
    records = [r for rs in rows for r in getattr(rs, kind)]
    key = ("shard_id", "example_id") + (("step",) if kind == "steps" else ())
    records.sort(key=lambda r: tuple(getattr(r, k) for k in key))
    blank = {f.name: (0.0 if f.name.endswith("wall_s") else "-") for f in dataclasses.fields(record)
             if f.name in RUN_LEVEL or f.name.endswith("wall_s")}
    records = [dataclasses.replace(r, **{k: (v if getattr(r, k) is not None else None) for k, v in blank.items()})
               for r in records]
    buf = io.BytesIO()
    pq.write_table(to_table(records, record), buf)
    return buf.getvalue()


def _dicts(rows: list[ShardRows], kind: str) -> list[dict[str, Any]]:
    return [dataclasses.asdict(r) for rs in rows for r in getattr(rs, kind)]


@pytest.mark.parametrize("model", MODELS)
def test_rows_with_sharing_on_and_off_are_byte_identical(sweeps: dict[bool, Sweep], model: str) -> None:
    on, off = sweeps[True].rows[model], sweeps[False].rows[model]
    for kind in ("pairs", "steps"):
        assert _dicts(on, kind) and len(_dicts(on, kind)) == len(_dicts(off, kind))
        assert _parquet(on, kind) == _parquet(off, kind), (model, kind)
    assert {p["error_type"] for p in _dicts(on, "pairs")} == {None}


@pytest.mark.parametrize("model", MODELS)
def test_forwards_executed_are_the_references(sweeps: dict[bool, Sweep], model: str) -> None:
    for share, sweep in sweeps.items():
        pairs, steps = _dicts(sweep.rows[model], "pairs"), _dicts(sweep.rows[model], "steps")
        assert sweep.executed[model] == predicted_forwards_executed(pairs, steps, share=share), (model, share)
    assert not sweeps[False].trees[model] or all(len(t.cells) == 1 for t in sweeps[False].trees[model])
    assert not sweeps[False].memos[model]  # share_work: false remembers no decode


@pytest.mark.parametrize("model", MODELS)
def test_step_one_is_shared_by_every_cell_and_forks_follow_the_kept_runs(sweeps: dict[bool, Sweep], model: str) -> None:
    modes = 2 if model in FAMILIES["llada"] + FAMILIES["dream"] else 1  # one unit holds both modes
    trees = sweeps[True].trees[model]
    assert trees
    for tree in trees:
        assert len(tree.cells) == RULES * modes
        assert tree.groups[0].step == 1 and tree.groups[0].cells == tuple(range(len(tree.cells)))
        for step, parts in tree.forks:
            assert step >= 2 and sorted(c for p in parts for c in p) == sorted(
                c for g in tree.groups if g.step == step for c in g.cells)
        for g in tree.groups:  # cells computed together recorded the same step
            assert len({id(tree.steps[c][g.step - 1]) for c in g.cells}) == 1
            if g.step > 1 and modes == 2:  # a draft is verified: one verifier mode per computation
                assert len({id(tree.cells[c].decoder) for c in g.cells}) == 1
        n = len(tree.request.segments)
        assert len(tree.groups) < len(tree.cells) * n  # some later step was shared, not only step 1
    if modes == 2:
        assert any(step == 2 for t in trees for step, _ in t.forks)  # the modes part where a draft is verified
    if modes == 2 and model.startswith("tiny-"):  # a random tiny model keeps nothing at τ ≥ 0.3: base decodes
        memos = sweeps[True].memos[model]
        assert sum(m.hits for m in memos) > 0 and sum(m.saved.forwards for m in memos) > 0


def test_the_sweep_executes_at_most_a_third_of_what_it_records(sweeps: dict[bool, Sweep]) -> None:
    recorded = executed = first_step_only = 0
    for model in MODELS:
        pairs, steps = _dicts(sweeps[True].rows[model], "pairs"), _dicts(sweeps[True].rows[model], "steps")
        recorded += sum(p["base_forwards"] for p in pairs) + sum(s["forwards"] for s in steps)
        executed += sweeps[True].executed[model]
        # the earlier rule: base run and step 1 once per (model, example, verifier mode), every later step per cell
        once = {(p["model"], p["example_id"], p["verifier_mode"]): p["base_forwards"] for p in pairs}
        once1 = {(s["model"], s["example_id"], s["verifier_mode"]): s["forwards"] for s in steps if s["step"] == 1}
        first_step_only += sum(once.values()) + sum(once1.values()) + sum(s["forwards"] for s in steps if s["step"] > 1)
    assert sweeps[False].executed == {m: sum(
        p["base_forwards"] for p in _dicts(sweeps[False].rows[m], "pairs")) + sum(
        s["forwards"] for s in _dicts(sweeps[False].rows[m], "steps")) for m in MODELS}
    assert executed * 3 <= recorded, (executed, recorded, first_step_only)
    assert executed < first_step_only < recorded
