"""Every YAML under configs/ loads through its schema and validates; bad input gives one clear error."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from streamgen import config
from streamgen.adapt.config import AdaptConfig, validate_adapt
from streamgen.config import (
    BenchmarkConfig,
    ClusterConfig,
    ConfigError,
    GridConfig,
    ModelConfig,
    configs_dir,
    default_data_dir,
    load,
)

KINDS = {"models": ModelConfig, "benchmarks": BenchmarkConfig, "grid": GridConfig, "cluster": ClusterConfig,
         "adapt": AdaptConfig}
ALL_YAML = sorted(p for p in configs_dir().rglob("*") if p.suffix in (".yaml", ".yml"))


def _validate(kind: str, cfg) -> list[str]:
    if kind == "models":
        return config.validate_model(cfg)
    if kind == "benchmarks":
        return config.validate_benchmark(cfg, default_data_dir())
    if kind == "grid":
        return config.validate_grid(cfg)
    if kind == "adapt":
        return validate_adapt(cfg)
    from jobs.cluster.kinds import KINDS

    return [] if cfg.executor in KINDS else [f"executor={cfg.executor!r}"]


def test_there_are_configs_of_every_kind() -> None:
    for kind in KINDS:
        assert config.available(kind), f"configs/{kind}/ has no YAML"
    assert len(ALL_YAML) >= 10


@pytest.mark.parametrize("path", ALL_YAML, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_yaml_loads_and_validates(path: Path) -> None:
    kind = path.parent.name
    assert kind in KINDS and path.parent.parent == configs_dir(), f"{path}: YAML outside configs/<kind>/"
    assert path.suffix == ".yaml", "use the .yaml suffix: config.available() only lists *.yaml"
    cfg = load(KINDS[kind], path)
    if "name" in OmegaConf.load(path):
        assert cfg.name == path.stem, f"{path}: name: must equal the file name"
    assert _validate(kind, cfg) == []


@pytest.mark.parametrize("name", config.available("models"))
def test_model_configs_never_run_hub_code(name: str) -> None:
    """docs/design.md, 'Principles': model forwards are in-project; hub code runs only on an explicit opt-in."""
    cfg = config.model_config(name)
    assert cfg.family in config.FAMILIES
    assert cfg.trust_remote_code is False
    if cfg.source == "hub":
        assert cfg.path.count("/") == 1 and cfg.dtype == "bfloat16"


def test_default_model_is_offline_smollm2() -> None:
    assert GridConfig().models == ["smollm2"]
    cfg = config.model_config("smollm2")
    assert cfg.source == "smollm2" and cfg.dtype == "float32"
    assert config.model_config("qwen3-8b").chat_template_kwargs == {"enable_thinking": False}


def test_unknown_key_in_yaml_is_an_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "m.yaml"
    bad.write_text("name: m\nfamliy: autoregressive\n")
    with pytest.raises(ConfigError, match="famliy"):
        load(ModelConfig, bad)


def test_wrong_type_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="limit"):
        config.grid_config("local", ["limit=many"])


def test_missing_file_and_unknown_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load(ModelConfig, tmp_path / "none.yaml")
    with pytest.raises(ConfigError, match="unknown model 'gpt-9'.*known are"):
        config.model_config("gpt-9")
    with pytest.raises(ConfigError, match="unknown benchmark 'nope'"):
        config.benchmark_config("nope")


@pytest.mark.parametrize("override", ["limit", "=3", "models"])
def test_malformed_override_names_the_fix(override: str) -> None:
    with pytest.raises(ConfigError, match="malformed override .*write key=value"):
        config.grid_config("local", [override])


def test_grid_validation_collects_every_problem() -> None:
    grid = replace(config.grid_config("local"), models=["gpt-9"], benchmarks=["nope"], acceptance=["threshold",
                   "sampling"], taus=[1.5, -0.1], limit=0, cluster="moon", data_dir="/no/such/dir")
    problems = config.validate_grid(grid)
    text = "\n".join(problems)
    for needle in ("unknown model 'gpt-9'", "unknown benchmark 'nope'", "'sampling'", "1.5", "-0.1",
                   "limit=0", "cluster='moon'", "/no/such/dir"):
        assert needle in text, needle
    with pytest.raises(ConfigError) as info:
        config.raise_if_problems(problems)
    assert info.value.problems == problems


@pytest.mark.parametrize("tau,ok", [(0.0, True), (1.0, True), (0.5, True), (1.01, False), (-0.01, False),
                                    (float("nan"), False)])
def test_tau_must_be_a_probability(tau: float, ok: bool) -> None:
    assert (config.check_tau(tau) == []) is ok


def test_model_validation_names_each_fix() -> None:
    problems = config.validate_model(ModelConfig(name="m", family="x", source="tiny", tiny_arch="rnn", dtype="int3"))
    assert len(problems) == 3 and "rnn" in problems[1] and "int3" in problems[2]
    assert any("source=hub needs path=" in p for p in config.validate_model(ModelConfig(name="m")))


def test_benchmark_overrides_apply_per_grid_and_are_validated() -> None:
    grid = config.grid_config("local", ["benchmark_overrides={mbpp: [timeout_s=3.5]}"])
    assert config.grid_benchmark_config(grid, "mbpp").timeout_s == 3.5
    assert config.grid_benchmark_config(grid, "humaneval") == config.benchmark_config("humaneval")
    bad = config.grid_config("local", ["benchmark_overrides={nope: [timeout_s=1], mbpp: [bogus=1]}"])
    problems = config.validate_grid(bad)
    assert not any("nope" in p for p in problems), "an override for a benchmark not run is ignored"
    assert config.unused_overrides(bad) == ["nope"]
    assert any("bogus" in p for p in problems)


def test_readme_override_example_ignores_the_local_grids_ds1000_override(caplog) -> None:
    """The README's `benchmarks=[mbpp,chat]` on the local grid (which overrides ds1000) plans, and
    says once that the ds1000 override is ignored."""
    from jobs.grid.plan import plan_grid

    grid = config.grid_config("local", ["limit=5", "taus=[0.5,0.9]", "workers=2", "benchmarks=[mbpp,chat]"])
    assert "ds1000" in grid.benchmark_overrides
    with caplog.at_level("INFO", logger="jobs.grid.plan"):
        plan = plan_grid(grid)
    assert {s.cell.benchmark.name for s in plan.shards} == {"mbpp", "chat"}
    lines = [r.getMessage() for r in caplog.records if "ignoring benchmark_overrides" in r.getMessage()]
    assert len(lines) == 1 and "ds1000" in lines[0]


def test_options_system_prompt_is_refused_with_the_new_field_named() -> None:
    cfg = config.benchmark_config("humaneval", ["options.system_prompt=hi"])
    assert any("top-level system_prompt" in p for p in config.validate_benchmark(cfg))


def test_named_configs_take_their_file_stem_as_name() -> None:
    assert config.cluster_config("debug").name == "debug"
    assert config.grid_config("smoke").name == "smoke"


def test_one_data_directory_rule_for_grids_benchmarks_and_recipes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The grid, the benchmark readers and the adaptation recipe resolve their data directory alike."""
    from streamgen.adapt.config import adapt_config
    from streamgen.benchmarks import sources

    monkeypatch.setenv("STREAMGEN_DATA_DIR", str(tmp_path / "env"))
    assert config.resolve_data_dir(None) == config.resolve_data_dir("") == tmp_path / "env"
    assert config.resolve_data_dir(tmp_path / "mine") == config.resolve_data_dir(str(tmp_path / "mine"))
    assert sources.resolve_data_dir is config.resolve_data_dir  # the readers use this one function
    recipe = adapt_config("smoke")
    assert recipe.source.data_dir == "" and recipe.data_dir == tmp_path / "env"
    assert adapt_config("smoke", [f"source.data_dir={tmp_path / 'mine'}"]).data_dir == tmp_path / "mine"
    problems = config.validate_grid(replace(GridConfig(), data_dir=""))  # the grid: the same default
    assert any(f"data directory {tmp_path / 'env'} does not exist" in p for p in problems)
