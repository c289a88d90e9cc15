"""The cell fingerprint (streamgen/results/cells.py) and the composed system prompt, down to the rendered chat."""

from __future__ import annotations

import dataclasses

import pytest

from analysis.fingerprints import differing_keys
from jobs.grid.plan import plan_grid
from jobs.grid.shards import Cell
from jobs.run.rows import shard_context
from streamgen.acceptance_rules import Greedy, Threshold
from streamgen.config import benchmark_config, grid_config, model_config
from streamgen.families.registry import load_decoder
from streamgen.results.cells import cell_fingerprint, effective_system_prompt
from streamgen.stream import run_pair

MODEL_PROMPT = "The instruction may be truncated."


def _cell(model: list[str] = [], bench: list[str] = [], **kw: object) -> Cell:  # noqa: B006
    base = dict(rule=Threshold(0.5), verifier_mode=None, max_new_tokens=16, limit=3)
    return Cell(model_config("tiny-llama", model), benchmark_config("mbpp", bench), **{**base, **kw})


def test_prompts_compose_model_first_then_benchmark() -> None:
    assert effective_system_prompt("A", "B") == "A\n\nB"
    assert effective_system_prompt(None, "B") == "B" and effective_system_prompt("A", None) == "A"
    assert effective_system_prompt(None, "") is None


@pytest.mark.parametrize("change", [
    {"max_new_tokens": 32}, {"limit": 5}, {"limit": None}, {"rule": Threshold(0.9)}, {"rule": Greedy()},
    {"verifier_mode": "hidden"}, {"model": [f"system_prompt={MODEL_PROMPT}"]}, {"model": ["variant=lora"]},
    {"model": ["decoding.x=1"]}, {"model": ["seed=1"]}, {"bench": ["version=2"]}, {"bench": ["system_prompt=hi"]},
])
def test_every_result_defining_setting_changes_the_fingerprint(change: dict) -> None:
    base, other = _cell(), _cell(**change)
    assert other.fingerprint != base.fingerprint
    assert differing_keys([base.settings(), other.settings()]), "the settings must show what differs"


def test_the_fingerprint_is_stable_and_ignores_what_does_not_change_rows() -> None:
    assert _cell().fingerprint == _cell().fingerprint == cell_fingerprint(_cell().settings())
    a = grid_config("smoke", ["workers=1", "results_dir=/tmp/a"])
    b = grid_config("smoke", ["workers=2", "results_dir=/tmp/b", "shard_timeout_s=9"])
    assert [s.cell.fingerprint for s in plan_grid(a).shards] == [s.cell.fingerprint for s in plan_grid(b).shards]


def test_the_model_prompt_then_the_benchmarks_reach_both_runs_rendered() -> None:
    """The grid's request for a model with a system prompt, on a benchmark with one: every render
    of the base run and of each stream step carries both, model first, in one system turn."""
    plan = plan_grid(grid_config("smoke", ["models=[tiny-llama]", "benchmarks=[mbpp]", "limit=1",
                                           "acceptance=[greedy]"]))
    shard = plan.shards[0]
    model = model_config("tiny-llama", [f"system_prompt={MODEL_PROMPT}"])
    shard = dataclasses.replace(shard, cell=dataclasses.replace(shard.cell, model=model))
    task = plan.task(shard, "r", "test")
    request, ex = task.examples[0].request, task.examples[0]
    assert shard_context(task).cell is shard.cell  # one carrier: the rows' cell is the grid's object
    assert request is not None and ex.n_segments == len(request.segments) == len(plan.segments[("mbpp", ex.example_id)])
    bench_prompt = shard.cell.benchmark.system_prompt
    assert request is not None and bench_prompt
    assert request.system_prompt == f"{MODEL_PROMPT}\n\n{bench_prompt}"
    assert shard.cell.settings()["system_prompt"] == request.system_prompt

    decoder = load_decoder(model, max_new_tokens=4)
    rendered: list[str] = []
    original = decoder.render

    def spy(messages):  # type: ignore[no-untyped-def]
        ids = original(messages)
        rendered.append(decoder.tokenizer.decode(ids))
        return ids

    decoder.render = spy  # type: ignore[method-assign]
    outcome = run_pair(decoder, request, Greedy(), base_first=True)
    # check_request's token count, the base run, then one render per stream step
    assert len(rendered) == 2 + len(outcome.steps)
    for text in rendered:
        assert text.count(MODEL_PROMPT) == 1 and text.count(bench_prompt) == 1
        assert text.index(MODEL_PROMPT) < text.index(bench_prompt)
        assert text.count("<|im_start|>system") == 1
    assert rendered[1] == rendered[-1], "base run and final stream step render the same complete request"
