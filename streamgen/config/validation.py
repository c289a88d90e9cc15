"""Validation: every ``validate_*`` collects each problem it finds, naming the fix; the caller raises once
(:func:`streamgen.config.errors.raise_if_problems`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from streamgen import acceptance_rules as rules_registry
from streamgen.acceptance_rules import make_rule, rule_label, sweep
from streamgen.config.checks import list_problems, value_problems
from streamgen.config.cluster import ClusterConfig
from streamgen.config.errors import ConfigError
from streamgen.config.families import FAMILIES, TINY_ARCHS
from streamgen.config.loading import available, grid_benchmark_config, model_config
from streamgen.config.names import (
    DEVICE_NAMES,
    DTYPES,
    ESTIMATE_ONLY_MODEL_FIELDS,
    GRANULARITIES,
    LIVE_POLICIES,
    METRICS,
    MODEL_SOURCES,
    POLICIES,
    RULE_PARAM_LISTS,
    TYPIST_PRESETS,
)
from streamgen.config.paths import resolve_data_dir
from streamgen.config.schemas import BenchmarkConfig, CorrectionsConfig, GridConfig, ModelConfig, TypingConfig


def check_tau(tau: float | None, where: str = "tau") -> list[str]:
    if tau is None:
        return []
    if not isinstance(tau, (int, float)) or math.isnan(float(tau)) or not 0.0 <= float(tau) <= 1.0:
        return [f"{where}={tau!r} is outside [0, 1]: a threshold is a probability, e.g. {where}=0.9"]
    return []


def validate_model(cfg: ModelConfig) -> list[str]:
    p: list[str] = []
    n = cfg.name or "<model>"
    if cfg.family not in FAMILIES:
        p.append(f"model {n}: family={cfg.family!r} is not one of {FAMILIES}")
    if cfg.source not in MODEL_SOURCES:
        p.append(f"model {n}: source={cfg.source!r} is not one of {MODEL_SOURCES}")
    if cfg.source in ("hub", "local", "gguf") and not cfg.path:
        p.append(f"model {n}: source={cfg.source} needs path= (a hub id, a folder or a .gguf file)")
    if cfg.source == "scripted" and not cfg.path:
        p.append(f"model {n}: source=scripted needs path=<behaviour> (streamgen.models.scripted.SCRIPTS)")
    if cfg.source == "tiny" and cfg.tiny_arch not in TINY_ARCHS:
        p.append(f"model {n}: source=tiny needs tiny_arch in {TINY_ARCHS}, got {cfg.tiny_arch!r}")
    if cfg.dtype not in DTYPES:
        p.append(f"model {n}: dtype={cfg.dtype!r} is not one of {DTYPES}")
    if cfg.base_model is not None and not cfg.variant:
        p.append(f"model {n}: base_model={cfg.base_model} needs variant= (rows would pass for the plain model's)")
    return p


def validate_benchmark(cfg: BenchmarkConfig, data_dir: Path | None = None) -> list[str]:
    p: list[str] = []
    n = cfg.name or "<benchmark>"
    if not cfg.version:
        p.append(f"benchmark {n}: set version= (bump it whenever the prompt or scoring changes)")
    if not cfg.module:
        p.append(f"benchmark {n}: set module= (the streamgen.benchmarks module that loads and scores it)")
    if cfg.source not in ("local", "hub", "lm_eval"):
        p.append(f"benchmark {n}: source={cfg.source!r} must be local or hub (lm_eval: an lm_eval:TASK benchmark)")
    if cfg.source == "hub" and not cfg.hub_id:
        p.append(f"benchmark {n}: source=hub needs hub_id= and hub_split=")
    if cfg.source == "local" and data_dir is not None:
        path = data_dir / cfg.data_file
        if not cfg.data_file or not path.exists():
            p.append(f"benchmark {n}: data file {path} is missing; set data_dir= (or STREAMGEN_DATA_DIR) to "
                     "a folder holding the benchmark data and its MANIFEST.tsv (default: the repository's data/)")
    if cfg.max_new_tokens < 1:
        p.append(f"benchmark {n}: max_new_tokens={cfg.max_new_tokens} must be ≥ 1")
    if cfg.source != "lm_eval" and cfg.metric not in METRICS:
        p.append(f"benchmark {n}: metric={cfg.metric!r} must be pass@1, f1 or exact")
    if "system_prompt" in cfg.options:
        p.append(f"benchmark {n}: options.system_prompt moved to the top-level system_prompt field; "
                 "move it there (configs/benchmarks/*.yaml show the shape)")
    return p


def validate_grid(grid: GridConfig) -> list[str]:
    """Every problem with a grid and the model/benchmark configs it names, before anything starts."""
    p: list[str] = []
    data_dir = resolve_data_dir(grid.data_dir)
    if not data_dir.is_dir():
        p.append(f"data directory {data_dir} does not exist: set data_dir=PATH or STREAMGEN_DATA_DIR to a folder "
                 "with the benchmark data and its MANIFEST.tsv (the default is the repository's data/)")
        data_dir = None  # type: ignore[assignment]
    if not grid.models:
        p.append("models=[] is empty: name at least one model from configs/models/")
    row_names: dict[tuple[str, str | None], str] = {}
    for m in grid.models:
        try:
            cfg = model_config(m)
        except ConfigError as exc:
            p.extend(exc.problems)
            continue
        p.extend(validate_model(cfg))
        if (twin := row_names.setdefault((cfg.row_model, cfg.variant), m)) != m:
            p.append(f"models {twin} and {m} would write rows as the same (model, variant): give {m} its own variant")
    if grid.lm_eval_include_path and not Path(grid.lm_eval_include_path).is_dir():
        p.append(f"lm_eval_include_path={grid.lm_eval_include_path} is not a folder: point it at the folder of "
                 "your lm-eval task YAMLs (as lm-eval's --include_path)")
    if not grid.benchmarks:
        p.append("benchmarks=[] is empty: name at least one benchmark from configs/benchmarks/")
    for b in grid.benchmarks:
        try:
            p.extend(validate_benchmark(grid_benchmark_config(grid, b), data_dir))
        except ConfigError as exc:
            p.extend(exc.problems)
    # benchmark_overrides for benchmarks outside this run are ignored (jobs.grid.plan logs them once)
    p.extend(validate_acceptance(grid))
    if grid.limit is not None and grid.limit < 1:
        p.append(f"limit={grid.limit} must be ≥ 1 (or null for all examples)")
    if grid.shard_size != "auto" and (isinstance(grid.shard_size, bool) or not isinstance(grid.shard_size, int)
                                      or grid.shard_size < 1):
        p.append(f"shard_size={grid.shard_size!r} must be an integer ≥ 1 or auto (sized by the estimate)")
    if grid.workers < 1 or grid.score_workers < 1:
        p.append("workers and score_workers must be ≥ 1")
    if not 0.0 <= grid.max_error_fraction <= 1.0:
        p.append(f"max_error_fraction={grid.max_error_fraction} must be in [0, 1]")
    for mode in grid.verifier_modes:
        if mode not in ("visible", "hidden"):
            p.append(f"verifier_modes has {mode!r}: use visible and/or hidden")
    p.extend(validate_granularity(grid.granularity, grid.segment_chars))
    p.extend(validate_typing(grid.typing, live=True))
    p.extend(validate_corrections(grid.corrections))
    if grid.cluster not in available("cluster"):
        p.append(f"cluster={grid.cluster!r} unknown: known are {', '.join(available('cluster'))}")
    p.extend(value_problems(
        max_new_tokens=grid.max_new_tokens, shard_timeout_s=grid.shard_timeout_s, cluster=grid.cluster,
        object_store_mb=grid.ray.object_store_mb, num_cpus=grid.ray.num_cpus, num_gpus=grid.ray.num_gpus))
    p.extend(list_problems({
        "models": grid.models, "benchmarks": grid.benchmarks, "acceptance": grid.acceptance, "taus": grid.taus,
        "verifier_modes": grid.verifier_modes, "typing.chars_per_s": grid.typing.chars_per_s,
        "typing.policies": grid.typing.policies,
        **{f"examples.{bench}": list(ids) for bench, ids in grid.examples.items()}}))
    return p


def rule_problems(acceptance: str, params: dict[str, float | None]) -> list[str]:
    """The problem (if any) with one rule named in a config (``acceptance=threshold tau=0.9``), naming the fix."""
    try:
        make_rule(acceptance, params)
    except ValueError as exc:
        return [str(exc)]
    return []


def rule_values(grid: GridConfig) -> dict[str, list[float]]:
    """The grid's values of every acceptance-rule parameter, by parameter name (τ and the tie guard keep
    their own lists, ``taus`` and ``tie_guards``; the others are in ``rule_params``)."""
    return {**grid.rule_params, **{param: list(getattr(grid, key)) for param, key in RULE_PARAM_LISTS.items()}}


def rule_param_key(param: str) -> str:
    """The grid key that lists ``param``'s values: ``taus``, ``tie_guards`` or ``rule_params.<param>``."""
    return RULE_PARAM_LISTS.get(param, f"rule_params.{param}")


def validate_acceptance(grid: GridConfig) -> list[str]:
    """Every listed rule is registered (``streamgen.acceptance_rules.RULES``, read at each call), gets
    values for its required parameters and only values it accepts; every parameter list set is taken by a listed rule; a rule that
    reads top-2 margins (greedy's tie guard) runs on autoregressive models only (docs/numerics.md)."""
    registry, values = rules_registry.RULES, rule_values(grid)
    p = [f"acceptance={a!r} is not one of {tuple(registry)}" for a in grid.acceptance if a not in registry]
    listed = [a for a in grid.acceptance if a in registry]
    for param, vals in values.items():
        takers = [a for a, cls in registry.items() if param in cls.params]
        # a required parameter's values may stay while acceptance is overridden (taus with acceptance=[greedy]);
        # an optional one's only add cells to its rule, and a parameter no rule takes is a typo
        sweeps = any(not registry[a].params[param].optional for a in takers)
        if vals and not sweeps and not any(param in registry[a].params for a in listed):
            p.append(f"{rule_param_key(param)} is set but acceptance lists no rule that takes {param} "
                     f"({', '.join(takers) or 'none does'}): add one, or drop {rule_param_key(param)}")
    for a in listed:
        p.extend(_rule_value_problems(a, values))
    if p:
        return p
    rules = [rule for a in listed for rule in sweep(a, values)]
    for m in grid.models if any(rule.needs_margins for rule in rules) else ():
        try:
            family = model_config(m).family
        except ConfigError:
            continue  # reported with the model
        if family != "autoregressive":
            needing = ", ".join(rule_label(r) for r in rules if r.needs_margins)
            p.append(f"{needing} needs top-2 margins, which only autoregressive models report: {m} is {family}")
    return p


def _rule_value_problems(name: str, values: dict[str, list[float]]) -> list[str]:
    """Rule ``name``'s required parameters have values, and each value builds the rule."""
    cls = rules_registry.RULES[name]
    examples = {k: float(spec.example) for k, spec in cls.params.items() if not spec.optional}
    p: list[str] = []
    for param, spec in cls.params.items():
        key = rule_param_key(param)
        if not spec.optional and not values.get(param):
            p.append(f"acceptance lists {name} but {key}=[] is empty: e.g. {key}=[{spec.example}]")
        for v in values.get(param, ()):
            try:
                make_rule(name, {**examples, param: v})
            except (TypeError, ValueError) as exc:
                p.append(f"{key} has {v!r}: {exc}")
    return p


def cluster_device_problems(cluster: ClusterConfig) -> list[str]:
    """``device`` must name a row of the estimate's device table (or be null: this machine's ``cpu``)."""
    if cluster.device is None or cluster.device in DEVICE_NAMES:
        return []
    return [f"cluster {cluster.name}: device={cluster.device!r} is not one of {DEVICE_NAMES} (the GPU-hour "
            "estimate's device table, streamgen/sizing/devices.py); e.g. device: a100-80gb, or null for this machine"]


def result_fields(model: ModelConfig) -> dict[str, Any]:
    """``model``'s fields that can change a result (every field but ESTIMATE_ONLY_MODEL_FIELDS): what shard
    ids, fingerprints and caches hash, so the estimate's fields never move them."""
    from dataclasses import asdict

    return {k: v for k, v in asdict(model).items() if k not in ESTIMATE_ONLY_MODEL_FIELDS}


def unused_overrides(grid: GridConfig) -> list[str]:
    """Names in ``benchmark_overrides`` that this grid does not run (ignored, not an error)."""
    return sorted(b for b in grid.benchmark_overrides if b not in grid.benchmarks)


def validate_granularity(granularity: str, segment_chars: int) -> list[str]:
    p = []
    if granularity not in GRANULARITIES:
        p.append(f"granularity={granularity!r} is not one of {GRANULARITIES}")
    if segment_chars < 1:
        p.append(f"segment_chars={segment_chars} must be ≥ 1 (characters per segment for granularity=chars)")
    return p


def validate_corrections(cfg: CorrectionsConfig) -> list[str]:
    """Problems with a corrections block, each naming the fix."""
    p: list[str] = []
    if not (isinstance(cfg.typo_rate, (int, float)) and math.isfinite(cfg.typo_rate) and 0 <= cfg.typo_rate < 1):
        p.append(f"corrections.typo_rate={cfg.typo_rate} must be in [0, 1) (typos per typed character; 0 turns "
                 "corrections off), e.g. corrections.typo_rate=0.02")
    if cfg.correction_delay_chars < 1:
        p.append(f"corrections.correction_delay_chars={cfg.correction_delay_chars} must be ≥ 1 (characters typed "
                 "after a typo before the typist corrects it), e.g. corrections.correction_delay_chars=3")
    if cfg.seed < 0:
        p.append(f"corrections.seed={cfg.seed} must be ≥ 0")
    return p


def validate_typing(cfg: TypingConfig, *, live: bool = False) -> list[str]:
    """Problems with a typing config; ``live`` also checks ``live_policy`` (a grid's setting)."""
    p = []
    if not cfg.chars_per_s or any(not (math.isfinite(r) and r > 0) for r in cfg.chars_per_s):
        p.append(f"typing.chars_per_s={list(cfg.chars_per_s)} needs positive finite rates, e.g. [4,6.7,10]")
    if not (math.isfinite(cfg.sentence_pause_s) and cfg.sentence_pause_s >= 0):
        p.append(f"typing.sentence_pause_s={cfg.sentence_pause_s} must be ≥ 0 seconds")
    p.extend(f"typing.policies has {x!r}: use {POLICIES}" for x in cfg.policies if x not in POLICIES)
    if cfg.every_k < 1:
        p.append(f"typing.every_k={cfg.every_k} must be ≥ 1")
    if cfg.cap_tokens < 1:
        p.append(f"typing.cap_tokens={cfg.cap_tokens} must be ≥ 1")
    p.extend(f"typing.populations has {x!r}: use presets from {TYPIST_PRESETS}, e.g. typing.populations=[desktop]"
             for x in cfg.populations if x not in TYPIST_PRESETS)
    if cfg.users < 1:
        p.append(f"typing.users={cfg.users} must be ≥ 1 typist per population, e.g. typing.users=200")
    if cfg.seed < 0:
        p.append(f"typing.seed={cfg.seed} must be ≥ 0 (it seeds numpy's Generator)")
    if live and cfg.live_policy is not None and cfg.populations:
        p.append(f"typing.populations={list(cfg.populations)} with typing.live_policy set: a live run types at one "
                 "fixed rate and populations are evaluated post hoc; set typing.populations=[] or unset typing.live_policy")
    if live and cfg.live_policy is not None:
        if cfg.live_policy not in LIVE_POLICIES:
            p.append(f"typing.live_policy={cfg.live_policy!r}: live runs support {LIVE_POLICIES} "
                     "(cap is evaluated post hoc only)")
        if len(cfg.chars_per_s) != 1:
            p.append(f"typing.live_policy is set but typing.chars_per_s={list(cfg.chars_per_s)}: a live run "
                     "types at one rate, e.g. typing.chars_per_s=[10]")
    return p
