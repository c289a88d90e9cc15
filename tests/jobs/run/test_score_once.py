"""Each distinct answer of an example is scored once per work unit (``jobs.run.rows.score_unit``).

The acceptance cells of a work unit share one base run per example (``jobs.grid.units``), and a
greedy stream answer often equals the base answer, so scoring every pair's two answers ran the same
program up to 2 × cells times (10× per example for the two-mode diffusion models). The tests count what
reaches the scorer and the sandbox, against a count derived from the rows themselves (the set of distinct
(example, answer) texts), and check every verdict against scoring that answer alone.

Models: the tiny random Llama (autoregressive: its stream answer is its base answer, so each pair
collapses to one program) and the tiny DiffusionGemma (its stream answers differ from its base answers),
on MBPP (whose scorer runs the sandbox) and CoEdIT (F1). Random answers all score 0, so the verdicts are
designed: after decoding, every example's base answer becomes its reference answer (passes, F1 1) and in
the τ = 0.5 cell so does its stream answer, while the other cells keep their decoded (failing) stream
answers — a verdict shared with the wrong answer or cell then shows.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from jobs.grid.plan import GridPlan, plan_grid
from jobs.grid.units import group_shards
from jobs.run.actors import ModelActor
from jobs.run.rows import ShardRows, score_unit
from streamgen.benchmarks import load_benchmark
from streamgen.benchmarks.code_benchmark import CodeBenchmark
from streamgen.benchmarks.execution import Runner
from streamgen.benchmarks.text_benchmark import TextBenchmark
from streamgen.config import grid_config

MODELS = ("tiny-llama", "tiny-diffusiongemma")


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> GridPlan:
    out = tmp_path_factory.mktemp("score-once")
    return plan_grid(grid_config("smoke", [f"models=[{','.join(MODELS)}]", "benchmarks=[mbpp,coedit]", "taus=[0.5,0.9]",
                                           "limit=3", "shard_size=3", f"results_dir={out}"]))


def _designed(tasks: tuple[Any, ...], decoded: tuple[Any, ...]) -> tuple[Any, ...]:
    """The decoded shards with base answers (and the τ = 0.5 cell's stream answers) set to the reference."""
    out = []
    for task, dec in zip(tasks, decoded, strict=True):
        refs = {ex.example_id: ex.example.reference for ex in task.examples}
        results = []
        for r in dec.results:
            if r.outcome is not None:
                o, ref = r.outcome, refs[r.example_id]
                steps = o.steps
                if task.cell.tau == 0.5:
                    steps = (*steps[:-1], dataclasses.replace(steps[-1], answer=dataclasses.replace(o.stream, text=ref)))
                r = dataclasses.replace(r, outcome=dataclasses.replace(o, base=dataclasses.replace(o.base, text=ref),
                                                                       steps=steps))
            results.append(r)
        out.append(dataclasses.replace(dec, results=tuple(results)))
    return tuple(out)


@dataclasses.dataclass
class Counts:
    scorer_inputs: int = 0  # answers handed to the benchmark's score_many
    sandbox_programs: int = 0  # programs handed to the sandbox pool


@pytest.fixture(scope="module")
def counted(plan: GridPlan) -> Iterator[tuple[dict[bool, list[ShardRows]], dict[bool, Counts]]]:
    """Every unit of the plan decoded in-process and scored, with and without shared work, counting."""
    mp = pytest.MonkeyPatch()
    counts = {True: Counts(), False: Counts()}
    current: list[Counts] = []
    run_many = Runner.run_many

    def counting(score_many: Any) -> Any:
        def counting_score_many(self: Any, examples: Sequence[Any], answers: Sequence[str], **kw: Any) -> Any:
            current[0].scorer_inputs += len(answers)
            return score_many(self, examples, answers, **kw)
        return counting_score_many

    def counting_run_many(self: Any, programs: Sequence[str], **kw: Any) -> Any:
        current[0].sandbox_programs += len(programs)
        return run_many(self, programs, **kw)

    for cls in (CodeBenchmark, TextBenchmark):
        mp.setattr(cls, "score_many", counting(cls.score_many))
    mp.setattr(Runner, "run_many", counting_run_many)
    rows: dict[bool, list[ShardRows]] = {True: [], False: []}
    try:
        for share in (True, False):
            current[:] = [counts[share]]
            for model in MODELS:
                actor = ModelActor(plan.models[model])
                for unit in group_shards([s for s in plan.shards if s.model_name == model], share=share):
                    tasks = tuple(plan.task(s, "run", "test") for s in unit)
                    rows[share].extend(score_unit(tasks, _designed(tasks, actor.run_unit(tasks))))
        yield rows, counts
    finally:
        mp.undo()


def _pairs(rows: list[ShardRows]) -> list[Any]:
    return [p for r in rows for p in r.pairs if p.base_quality is not None]


def _distinct(pairs: list[Any], unit_of: dict[str, int]) -> set[tuple[int, str, str]]:
    """(unit, example, answer): what a unit needs scored; a unit is the shards of one example chunk of
    one benchmark (example ids carry their benchmark's name)."""
    return {(unit_of[p.shard_id], p.example_id, a) for p in pairs for a in (p.base_answer, p.stream_answer)}


def test_the_scorer_sees_each_distinct_answer_once_per_unit(plan: GridPlan, counted: Any) -> None:
    rows, counts = counted
    for share in (True, False):
        units = [u for m in MODELS for u in group_shards([s for s in plan.shards if s.model_name == m], share=share)]
        unit_of = {s.shard_id: i for i, u in enumerate(units) for s in u}
        pairs = _pairs(rows[share])
        assert len(pairs) == 2 * 2 * 3 * 3  # two models × two benchmarks × three cells × three examples
        assert counts[share].scorer_inputs == len(_distinct(pairs, unit_of)), share
    # the path under test: sharing collapses answers across cells, and an example of the second model
    # has a stream answer other than its base answer (two verdicts kept apart)
    assert counts[True].scorer_inputs < counts[False].scorer_inputs < 2 * len(_pairs(rows[False]))
    answers = collections.defaultdict(set)
    for p in _pairs(rows[True]):
        answers[(p.model, p.example_id)] |= {p.base_answer, p.stream_answer}
    assert max(len(v) for k, v in answers.items() if k[0] == MODELS[1]) > 1


def test_sandbox_runs_drop_to_the_distinct_programs(counted: Any) -> None:
    rows, counts = counted
    pairs = [p for p in _pairs(rows[True]) if p.benchmark == "mbpp"]
    per_answer = 2 * len(pairs)  # before: both answers of every pair row went to the sandbox
    assert 0 < counts[True].sandbox_programs <= counts[True].scorer_inputs < per_answer


def test_every_verdict_equals_scoring_that_answer_alone(plan: GridPlan, counted: Any) -> None:
    rows, _ = counted
    benches = {name: load_benchmark(cfg) for name, cfg in plan.benchmarks.items()}
    alone: dict[tuple[str, str], Any] = {}
    pairs = _pairs(rows[True])
    # the path under test: verdicts differ between the answers of one example and between its cells
    assert {(p.base_quality, p.stream_quality) for p in pairs if p.tau == 0.5} == {(1.0, 1.0)}
    assert {p.base_quality for p in pairs} == {1.0} and 0.0 in {p.stream_quality for p in pairs}
    for p in pairs:
        example, bench = plan.examples[p.benchmark][p.example_id], benches[p.benchmark]
        for answer, quality, status in ((p.base_answer, p.base_quality, p.base_score_status),
                                        (p.stream_answer, p.stream_quality, p.stream_score_status)):
            key = (p.example_id, answer)
            if key not in alone:
                alone[key] = bench.score(example, answer)
            assert (quality, status) == (alone[key].quality, alone[key].status), (p.shard_id, p.example_id)
