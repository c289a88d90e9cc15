"""Strict values and unmergeable overrides (the hostile battery's bad-input cases): each is one
ConfigError naming the key and the accepted form, raised before anything is written or started."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamgen.config import ConfigError, grid_config, validate_grid
from streamgen.config.checks import duplicates
from workflows import full_grid

CASES = [  # (overrides, fragments the one message must hold)
    (["max_new_tokens=-5"], ["max_new_tokens=-5", "≥ 1"]),
    (["max_new_tokens=0"], ["max_new_tokens=0", "≥ 1"]),
    (["shard_timeout_s=-1"], ["shard_timeout_s=-1", "> 0"]),
    (["shard_timeout_s=0"], ["shard_timeout_s=0", "> 0"]),
    (["ray.object_store_mb=-1"], ["ray.object_store_mb=-1", "75 MiB", "ray.object_store_mb=256"]),
    (["ray.object_store_mb=74"], ["Ray's minimum"]),
    (["ray.object_store_mb=100000000"], ["exceeds this machine's"]),
    (["models=[tiny-llama,tiny-llama]"], ["models lists tiny-llama more than once", "models=[tiny-llama]"]),
    (["acceptance=[threshold]", "taus=[0.5,0.5]"], ["taus lists 0.5 more than once", "taus=[0.5]"]),
    (["benchmarks=[mbpp,coedit,mbpp]"], ["benchmarks lists mbpp", "benchmarks=[mbpp,coedit]"]),
    (["acceptance=[greedy,greedy]"], ["acceptance lists greedy"]),
    (["verifier_modes=[visible,visible]"], ["verifier_modes lists visible"]),
    (["typing.chars_per_s=[4,4]"], ["typing.chars_per_s lists 4"]),
    (["taus=[0.5,0.9"], ["cannot parse override 'taus=[0.5,0.9'", "taus=[0.5,0.9]", "values are YAML"]),
    (["benchmarks.ds1000.options.python=null"],
     ["benchmark_overrides.ds1000=[options.python=null]", "benchmarks is a list"]),
    (["models.0=x"], ["models is a list", "models=[a,b]"]),
    (["ray.object_stor=5"], ["ray.object_stor", "ray.object_store_mb", "accepted here"]),
    (["typing.rate=3"], ["typing.rate", "typing.chars_per_s"]),
]


def _problems(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as caught:
        grid = grid_config("smoke", overrides)
        problems = validate_grid(grid)
        if problems:
            raise ConfigError(problems)
    return str(caught.value)


@pytest.mark.parametrize(("overrides", "fragments"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_value_is_one_named_config_error(overrides: list[str], fragments: list[str]) -> None:
    message = _problems(overrides)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_valid_bounds_pass() -> None:
    grid = grid_config("smoke", ["max_new_tokens=1", "shard_timeout_s=0.5", "ray.object_store_mb=75",
                                 "acceptance=[greedy,threshold]", "taus=[0.5,0.9]"])
    assert validate_grid(grid) == []


def test_every_problem_at_once() -> None:
    message = _problems(["max_new_tokens=-5", "shard_timeout_s=-1", "models=[tiny-llama,tiny-llama]"])
    assert "3 problems" in message


@pytest.mark.parametrize("bad", ["taus=[0.5,0.9", "benchmarks.ds1000.options.python=null", "max_new_tokens=-5",
                                 "ray.object_store_mb=-1"])
def test_workflow_exits_2_before_writing(bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    assert full_grid.main(["grid=smoke", bad, f"results_dir={results}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert not results.exists(), "nothing was written (no config/*.yaml) before the error"


def _reference_duplicates(values: list[int]) -> list[int]:
    counts = {v: values.count(v) for v in values}
    return sorted(v for v, n in counts.items() if n > 1)


@given(st.lists(st.integers(0, 5), max_size=12))
def test_duplicates_against_counting(values: list[int]) -> None:
    assert sorted(duplicates(values)) == _reference_duplicates(values)
