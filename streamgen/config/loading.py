"""Loading a config: schema defaults → YAML → ``key=value`` overrides, merged in struct mode and converted once
to a frozen dataclass (docs/design.md, 'Style', habit 3); the named configs under ``configs/``."""

from __future__ import annotations

import os
import typing
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from streamgen.config.checks import accepted_keys, field_names, override_path_problems
from streamgen.config.cluster import ClusterConfig
from streamgen.config.errors import ConfigError, raise_if_problems
from streamgen.config.names import LM_EVAL_PREFIX, LM_EVAL_UNRESOLVED
from streamgen.config.paths import configs_dir
from streamgen.config.schemas import BenchmarkConfig, GridConfig, ModelConfig

T = TypeVar("T")


def _open_dict_fields(node: DictConfig, schema: type) -> None:
    """Free-form ``dict`` fields accept any key; everything else stays in struct mode."""
    hints = typing.get_type_hints(schema)
    for f in fields(schema):
        hint = hints[f.name]
        if typing.get_origin(hint) is dict:
            OmegaConf.set_struct(node[f.name], False)
        elif isinstance(hint, type) and is_dataclass(hint):
            _open_dict_fields(node[f.name], hint)


def parse_overrides(overrides: Sequence[str]) -> DictConfig:
    """``key=value`` strings → a config; a malformed or unparsable one raises :class:`ConfigError`
    naming it and the accepted form."""
    bad = [f"malformed override {o!r}: write key=value (e.g. limit=5 or taus=[0.5,0.9])"
           for o in overrides if "=" not in o or o.startswith("=")]
    for o in overrides:
        if o not in bad and "=" in o and not o.startswith("="):
            try:
                OmegaConf.from_dotlist([o])
            except (OmegaConfBaseException, yaml.YAMLError) as exc:
                reason = " ".join(str(exc).split())
                bad.append(f"cannot parse override {o!r} ({reason}): values are YAML, e.g. limit=5, "
                           "taus=[0.5,0.9], models=[tiny-llama,smollm2], results_dir=/tmp/x; quote the "
                           "whole argument in the shell if it holds spaces or brackets")
    if bad:
        raise ConfigError(bad, title="bad command-line overrides")
    return OmegaConf.from_dotlist(list(overrides))


def load(schema: type[T], *sources: str | os.PathLike[str] | dict[str, Any] | DictConfig,
         overrides: Sequence[str] = ()) -> T:
    """Merge ``schema`` defaults, then each source (YAML path, dict or DictConfig), then overrides.

    Unknown keys and values of the wrong type raise :class:`ConfigError` naming the key.
    """
    base = OmegaConf.structured(schema)
    OmegaConf.set_readonly(base, False)
    OmegaConf.set_struct(base, True)
    _open_dict_fields(base, schema)
    layers: list[Any] = []
    for src in sources:
        if isinstance(src, (str, os.PathLike)):
            path = Path(src)
            if not path.is_file():
                raise ConfigError([f"config file {path} does not exist"])
            layers.append(OmegaConf.load(path))
        else:
            layers.append(OmegaConf.create(src) if isinstance(src, dict) else src)
    layers.append(parse_overrides(overrides))
    raise_if_problems(override_path_problems(schema, overrides), "bad command-line overrides")
    try:
        merged = OmegaConf.merge(base, *layers)
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except TypeError as exc:  # a container where the schema has a scalar or the other way round
        raise ConfigError([f"{exc} while merging {list(overrides)}: a list is set whole (key=[a,b]), a "
                           f"mapping key by key (key.sub=value); {schema.__name__}'s fields are "
                           f"{', '.join(field_names(schema))}"]) from exc
    except OmegaConfBaseException as exc:
        msg = str(exc).splitlines()[0]
        key = getattr(exc, "full_key", None)
        hint = f" (key '{key}')" if key else ""
        accepted = accepted_keys(schema, str(key)) if key else f"see {schema.__name__}'s fields"
        raise ConfigError([f"{msg}{hint}: check the spelling; {accepted}"]) from exc


def to_yaml(cfg: Any) -> str:
    """A config dataclass as YAML (logged next to the results)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def available(kind: str) -> list[str]:
    """Names of the YAML files under ``configs/<kind>/``."""
    return sorted(p.stem for p in (configs_dir() / kind).glob("*.yaml"))


def _named(kind: str, schema: type[T], name: str, overrides: Sequence[str] = ()) -> T:
    path = configs_dir() / kind / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(available(kind)) or "none"
        raise ConfigError([f"unknown {kind[:-1] if kind.endswith('s') else kind} {name!r}: "
                           f"known are {known} (files in configs/{kind}/)"])
    # The file's stem names the config unless the YAML says otherwise.
    return load(schema, {"name": name}, path, overrides=overrides)


def model_config(name: str, overrides: Sequence[str] = ()) -> ModelConfig:
    return _named("models", ModelConfig, name, overrides)


def benchmark_config(name: str, overrides: Sequence[str] = ()) -> BenchmarkConfig:
    if name.startswith(LM_EVAL_PREFIX):
        return lm_eval_benchmark_config(name, "", overrides)
    return _named("benchmarks", BenchmarkConfig, name, overrides)


def lm_eval_benchmark_config(name: str, include_path: str, overrides: Sequence[str] = ()) -> BenchmarkConfig:
    """The config of ``lm_eval:TASK``: lm-eval's task TASK (``streamgen.benchmarks.lm_eval_task``), found in
    ``include_path`` or among lm-eval's own tasks. Its version, metric and answer budget are the task's,
    filled in when the task is read (``LmEvalBenchmark.cfg``); ``options`` may set ``apply_chat_template``,
    ``fewshot_as_multiturn``, ``system_instruction`` and ``num_fewshot`` as lm-eval's ``simple_evaluate`` takes them."""
    include = str(Path(include_path).resolve()) if include_path else ""
    return load(BenchmarkConfig, {"name": name, "version": LM_EVAL_UNRESOLVED, "module": "lm_eval", "source": "lm_eval",
                                  "answer_extraction": "text", "metric": "",
                                  "options": {"task": name[len(LM_EVAL_PREFIX):], "include_path": include}},
                overrides=overrides)


def cluster_config(name: str, overrides: Sequence[str] = ()) -> ClusterConfig:
    return _named("cluster", ClusterConfig, name, overrides)


def grid_config(name: str, overrides: Sequence[str] = ()) -> GridConfig:
    return _named("grid", GridConfig, name, overrides)


def grid_benchmark_config(grid: GridConfig, name: str) -> BenchmarkConfig:
    """The benchmark's config as this grid runs it (its ``benchmark_overrides`` applied)."""
    if name.startswith(LM_EVAL_PREFIX):
        return lm_eval_benchmark_config(name, grid.lm_eval_include_path, list(grid.benchmark_overrides.get(name, [])))
    return benchmark_config(name, list(grid.benchmark_overrides.get(name, [])))
