"""Structured configuration: omegaconf dataclass schemas, YAML + ``key=value`` overrides, validation.

Every entry point does the same three things (docs/design.md, 'Style', habit 3):

1. ``load(Schema, yaml_path, overrides)`` merges schema defaults → YAML → CLI overrides in struct
   mode (an unknown key is an error) and converts once to a frozen dataclass;
2. ``validate_*`` collects every problem it can find;
3. ``raise_if_problems`` raises one :class:`ConfigError` listing them all, each naming the fix.

Files live under ``configs/``: ``grid/``, ``models/``, ``benchmarks/``, ``cluster/`` (YAML only).

The package, one concern per module; this face re-exports the names the rest of the code imports
(``from streamgen.config import X``, as 200-odd modules do):

- ``paths``: the repository root, ``configs/``, the data directory;
- ``errors``: :class:`ConfigError` and ``raise_if_problems``;
- ``names``: the vocabularies a value may take (sources, dtypes, metrics, policies, devices);
- ``families``: the model families' names and facts, read from ``streamgen/families/*/family.yaml``;
- ``schemas``: the model, benchmark, grid, Ray, typing and corrections dataclasses;
- ``cluster``: the cluster config and the executors;
- ``loading``: merge and convert, the named configs under ``configs/``;
- ``validation``: the ``validate_*`` functions;
- ``checks``: strict values and override paths that cannot merge (needs nothing of the rest).
"""

from streamgen.config.cluster import ClusterConfig
from streamgen.config.errors import ConfigError, raise_if_problems
from streamgen.config.families import (
    DIFFUSION_DEVIATIONS,
    FAMILIES,
    TINY_ARCHS,
    VERIFIER_MODE_FAMILIES,
    Family,
)
from streamgen.config.loading import (
    available,
    benchmark_config,
    cluster_config,
    grid_benchmark_config,
    grid_config,
    lm_eval_benchmark_config,
    load,
    model_config,
    parse_overrides,
    to_yaml,
)
from streamgen.config.names import (
    DEVICE_NAMES,
    DTYPES,
    ESTIMATE_ONLY_MODEL_FIELDS,
    GRANULARITIES,
    LIVE_POLICIES,
    LM_EVAL_PREFIX,
    LM_EVAL_UNRESOLVED,
    METRICS,
    MODEL_SOURCES,
    POLICIES,
    RULE_PARAM_LISTS,
    TYPIST_PRESETS,
)
from streamgen.config.paths import REPO_ROOT, configs_dir, default_data_dir, resolve_data_dir
from streamgen.config.schemas import (
    BenchmarkConfig,
    CorrectionsConfig,
    GridConfig,
    ModelConfig,
    RayConfig,
    TypingConfig,
)
from streamgen.config.validation import (
    check_tau,
    cluster_device_problems,
    result_fields,
    rule_param_key,
    rule_problems,
    rule_values,
    unused_overrides,
    validate_acceptance,
    validate_benchmark,
    validate_corrections,
    validate_granularity,
    validate_grid,
    validate_model,
    validate_typing,
)

__all__ = [
    "DEVICE_NAMES", "DIFFUSION_DEVIATIONS", "DTYPES", "ESTIMATE_ONLY_MODEL_FIELDS", "FAMILIES",
    "GRANULARITIES", "LIVE_POLICIES", "LM_EVAL_PREFIX", "LM_EVAL_UNRESOLVED", "METRICS", "MODEL_SOURCES",
    "POLICIES", "REPO_ROOT", "RULE_PARAM_LISTS", "TINY_ARCHS", "TYPIST_PRESETS", "VERIFIER_MODE_FAMILIES",
    "BenchmarkConfig", "ClusterConfig", "ConfigError", "CorrectionsConfig", "Family", "GridConfig", "ModelConfig",
    "RayConfig", "TypingConfig", "available", "benchmark_config", "check_tau", "cluster_config",
    "cluster_device_problems", "configs_dir", "default_data_dir", "grid_benchmark_config", "grid_config",
    "lm_eval_benchmark_config", "load", "model_config", "parse_overrides", "raise_if_problems", "resolve_data_dir",
    "result_fields", "rule_param_key", "rule_problems", "rule_values", "to_yaml", "unused_overrides",
    "validate_acceptance", "validate_benchmark", "validate_corrections", "validate_granularity", "validate_grid",
    "validate_model", "validate_typing",
]
