"""Structured configuration: omegaconf dataclass schemas, YAML + ``key=value`` overrides, validation.

Every entry point does the same three things (docs/design.md, 'Style', habit 3):

1. ``load(Schema, yaml_path, overrides)`` merges schema defaults → YAML → CLI overrides in struct
   mode (an unknown key is an error) and converts once to a frozen dataclass;
2. ``validate_*`` collects every problem it can find;
3. ``raise_if_problems`` raises one :class:`ConfigError` listing them all, each naming the fix.

Files live under ``configs/``: ``grid/``, ``models/``, ``benchmarks/``, ``cluster/`` (YAML only).
"""

from __future__ import annotations

import math
import os
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from streamgen import acceptance_rules as rules_registry
from streamgen import config_checks
from streamgen.acceptance_rules import make_rule, rule_label, sweep

REPO_ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

Family = typing.Literal["autoregressive", "refusion", "bidirectional", "diffusion_gemma"]
"""A model family's name: each has a decoder module with its ``FAMILY`` plug-in (streamgen/families/registry.py)
and a forward rule (streamgen/sizing/forward_counts.py); tests/test_models.py checks the three agree."""
FAMILIES: tuple[Family, ...] = typing.get_args(Family)
VERIFIER_MODE_FAMILIES = ("bidirectional", "diffusion_gemma")  # families the grid sweeps verifier_modes for
DIFFUSION_DEVIATIONS: dict[str, dict[str, Any]] = {
    "bidirectional": {
        "cap_gen_length": False,  # gen_length capped at the answer budget (official: gen_length is the length)
        "stop_after_eos_block": False,  # stop after the block holding the first EOS (official: fill every block)
        "suppress_mask_logit": False,  # the mask id never predicted (official: argmax over the whole vocabulary)
        "fixed_prompt_masks": False,  # mask ids in the request stay (official: they are masked positions)
        "full_block_refill": False,  # a stream step's block with any mask runs all its steps (official rate: m/B of them)
        "refill_after_eos": False,  # a kept draft's EOS tail is masked and decoded again (it lies after the answer)
    },
    "refusion": {
        "block_length": None,  # a fixed block length (official: gen_length / serial_num_blocks)
        "cap_gen_length": False,  # gen_length capped at the answer budget (official: gen_length is the length)
        "stop_on_every_eos": False,  # every EOS id the configs name ends the answer (official: eos_token_id)
        "suppress_mask_logit": False,  # the mask id never planned (official: argmax over the whole vocabulary)
    },
}
"""Per diffusion family, the project's differences from the official samplers: option → default (off).
The decoders' settings take their defaults from here; every cell fingerprint of the family records them,
so a run that turns one on never shares a fingerprint with one that does not (docs/diffusion.md)."""
MODEL_SOURCES = ("hub", "local", "gguf", "smollm2", "gemma3_270m", "tiny", "scripted")
TINY_ARCHS = ("llama", "qwen3", "gemma3", "llada", "dream", "diffusion_gemma")
# acceptance-rule parameters that keep a grid list of their own (their result columns are tau and tie_guard)
RULE_PARAM_LISTS = {"tau": "taus", "tie_guard": "tie_guards"}
METRICS = ("pass@1", "f1", "exact")  # a benchmark YAML's metric; an lm_eval:TASK's is the task's own
LM_EVAL_PREFIX = "lm_eval:"  # benchmarks=[lm_eval:TASK]: lm-evaluation-harness's task TASK
LM_EVAL_UNRESOLVED = "lm_eval"  # an lm_eval:TASK config's version until its task is read
DTYPES = ("float32", "bfloat16", "float16")
EXECUTORS = ("local", "debug", "slurm")
GRANULARITIES = ("sentence", "word", "chars")
POLICIES = ("every", "latest", "every_k", "cap")
LIVE_POLICIES = ("every", "latest", "every_k")
TYPIST_PRESETS = ("desktop", "mobile")  # streamgen.timing.typists.PRESETS (docs/typists.md)
DEVICE_NAMES = ("a100-80gb", "a6000", "h100", "h200", "cpu")  # streamgen.sizing.devices.DEVICES' keys
# ModelConfig fields no result depends on: the estimate's sizes, and what only the pre-flight checks
# (the rendered request depends on the tokenizer's template, which the snapshot commit pins).
ESTIMATE_ONLY_MODEL_FIELDS = ("parameters", "layers", "chat_template_required", "active_parameters", "experts",
                              "experts_per_token")


class ConfigError(ValueError):
    """A user or configuration error; the message lists every problem and how to fix it."""

    def __init__(self, problems: Sequence[str], title: str = "invalid configuration") -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{title} ({len(self.problems)} problem{'s' * (len(self.problems) != 1)}):\n{lines}")


def configs_dir() -> Path:
    """``configs/`` of this checkout, or ``$STREAMGEN_CONFIGS``."""
    return Path(os.environ.get("STREAMGEN_CONFIGS", REPO_ROOT / "configs"))


def default_data_dir() -> Path:
    """``$STREAMGEN_DATA_DIR``, else the repository's own ``data/`` (offline benchmark data + manifest)."""
    return Path(os.environ.get("STREAMGEN_DATA_DIR", REPO_ROOT / "data"))


def resolve_data_dir(data_dir: Path | str | None) -> Path:
    """The benchmark data directory to read: ``data_dir`` when set (a grid's ``data_dir``, a
    ``--data-dir`` argument), else :func:`default_data_dir`. The one place this choice is made."""
    return Path(data_dir) if data_dir else default_data_dir()


# --------------------------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    """One model: where its weights come from and how it decodes (``configs/models/<name>.yaml``)."""

    name: str = ""
    family: str = "autoregressive"
    source: str = "hub"  # hub id, local folder, GGUF file, the packaged SmolLM2, a tiny random or a scripted model
    path: str = ""  # hub id / folder / .gguf path / scripted behaviour; empty for smollm2, gemma3_270m and tiny
    revision: str | None = None
    gguf_file: str | None = None
    tiny_arch: str | None = None  # source=tiny: llama | qwen3 | gemma3 | llada | dream | diffusion_gemma
    dtype: str = "float32"
    seed: int = 0  # weight seed for tiny models
    trust_remote_code: bool = False  # explicit opt-in only; default models never run hub code
    max_context: int | None = None  # tokens; None = the model config's max_position_embeddings
    system_prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    decoding: dict[str, Any] = field(default_factory=dict)  # family-specific decode settings
    variant: str | None = None  # adaptation variant label carried into result rows
    # An adapted model: the plain model's name. Its result rows carry that name as `model` (and
    # `variant`), so Table 3 sets the variant next to the plain model (docs/adaptation.md).
    base_model: str | None = None
    # For the GPU-hour estimate only (streamgen/sizing/parameters.py), where no config.json is cached: the model
    # card's parameter count and layer count. They change no result: not in shard ids or fingerprints.
    parameters: int | None = None
    layers: int | None = None
    # A mixture of experts (estimate only, likewise): parameters a token computes with, experts per layer and
    # experts each token is routed to (`parameters` is then every weight: what memory holds).
    active_parameters: int | None = None
    experts: int | None = None
    experts_per_token: int | None = None
    # The pre-flight refuses a hub / local checkpoint whose tokenizer has no chat template (its requests would
    # silently become a plain transcript); false for a base model. Checked only: no result depends on it.
    chat_template_required: bool = True

    @property
    def row_model(self) -> str:
        """The ``model`` column of this model's result rows: the plain model's name for a variant."""
        return self.base_model or self.name


@dataclass(frozen=True)
class BenchmarkConfig:
    """One benchmark as data (``configs/benchmarks/<name>.yaml``); code lives in its module."""

    name: str = ""
    version: str = ""
    module: str = ""  # streamgen.benchmarks.<module>
    source: str = "local"  # local | hub
    data_file: str = ""  # relative to the data directory (source=local)
    hub_id: str | None = None
    hub_config: str | None = None
    hub_split: str | None = None
    prompt_template: str = "{request}"
    answer_extraction: str = "code"  # code | text
    metric: str = "pass@1"  # pass@1 | f1 | exact
    timeout_s: float = 10.0
    max_new_tokens: int = 512
    system_prompt: str | None = None  # the answer-format instruction; after the model's own (streamgen.results.cells)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RayConfig:
    address: str | None = None  # None: start a local Ray on loopback
    num_cpus: int | None = None
    num_gpus: int | None = None
    object_store_mb: int = 256


@dataclass(frozen=True)
class TypingConfig:
    """Typing timelines and drafting policies (docs/design.md, 'Vocabulary'; docs/timing.md).

    ``chars_per_s`` lists the typing rates the post-hoc analysis sweeps; a live grid types at exactly
    one. Segment i arrives at (characters typed up to its end) / rate + pauses, where code blocks
    are pasted (arrive at once) when ``paste_code`` and every sentence end but the last adds
    ``sentence_pause_s``.
    """

    chars_per_s: list[float] = field(default_factory=lambda: [4.0, 6.7, 10.0])
    sentence_pause_s: float = 0.0
    paste_code: bool = True
    policies: list[str] = field(default_factory=lambda: list(POLICIES))  # post-hoc: every | latest | every_k | cap
    every_k: int = 2  # every_k: draft at every k-th segment (and the last)
    cap_tokens: int = 32  # cap: drafts never longer than this many tokens
    live_policy: str | None = None  # grid only: run the stream live on the real clock (every | latest | every_k)
    # Post hoc, besides the fixed rates: each preset's sampled population of `users` typists (per-user
    # speed, per-keystroke intervals, sentence and paragraph pauses), drawn from `seed` (docs/typists.md)
    populations: list[str] = field(default_factory=list)  # desktop | mobile
    users: int = 200
    seed: int = 0


@dataclass(frozen=True)
class CorrectionsConfig:
    """Typos and their corrections while typing (``streamgen.timing.corrections``; docs/typists.md).

    Each character of the request is mistyped with probability ``typo_rate`` (a wrong character in its
    place); the typist notices after typing ``correction_delay_chars`` more characters, backspaces to
    it and retypes. Steps in between send the text with the typo, so a state need not extend the last.
    ``typo_rate: 0`` (the default) is off: the states are the prefixes, and no cell id changes."""

    typo_rate: float = 0.0  # per typed character, in [0, 1)
    correction_delay_chars: int = 3  # characters typed after a typo before it is corrected (≥ 1)
    seed: int = 0  # with the example id, seeds where the typos fall

    @property
    def enabled(self) -> bool:
        return self.typo_rate > 0


@dataclass(frozen=True)
class GridConfig:
    """A grid of (model × benchmark × acceptance/τ × example) cells (``configs/grid/<name>.yaml``)."""

    name: str = "local"
    models: list[str] = field(default_factory=lambda: ["smollm2"])
    benchmarks: list[str] = field(default_factory=list)
    acceptance: list[str] = field(default_factory=lambda: ["greedy"])
    taus: list[float] = field(default_factory=list)  # one threshold cell per τ when 'threshold' is listed
    # One more greedy cell per value: greedy with tie_guard=g (dtype spacings; autoregressive models
    # only): a draft token is kept only where the verifier's top-1 beats its top-2 by more than g.
    tie_guards: list[float] = field(default_factory=list)
    # Values of the other acceptance rules' parameters, by parameter name (streamgen/acceptance_rules.py),
    # e.g. {k: [2, 4]}: swept like taus (required parameters) or tie_guards (optional ones).
    rule_params: dict[str, list[float]] = field(default_factory=dict)
    verifier_modes: list[str] = field(default_factory=lambda: ["visible"])  # bidirectional ablation
    limit: int | None = 3  # examples per benchmark (None: all)
    # Per benchmark, the example ids to run instead of its first `limit` (in the data's order); benchmarks
    # not listed use `limit`. The embedded default picks examples whose answers end before its budget.
    examples: dict[str, list[str]] = field(default_factory=dict)
    # examples per shard, or `auto`: per (model, benchmark) from the estimated unit time, and each unit's
    # timeout from its estimate instead of shard_timeout_s (jobs/unit_sizing.py, docs/estimate.md)
    shard_size: Any = 4
    max_new_tokens: int | None = None  # None: the benchmark's own
    results_dir: str = "results/local"
    data_dir: str = ""  # empty: $STREAMGEN_DATA_DIR or the repository's data/
    workers: int = 1  # model actors
    score_workers: int = 1
    seed: int = 0
    max_error_fraction: float = 0.1
    # Cells differing only in acceptance/τ run each example's base run and first stream step once
    # (jobs/shared_work.py); rows are the same either way. Not in shard ids or fingerprints.
    share_work: bool = True
    # Each model actor runs one untimed warm-up pair (streamgen/warmup.py) before its first timed pair, so no
    # row's wall clock absorbs CUDA start-up. On no row and in no forward count; not in shard ids or fingerprints.
    warm_up: bool = True
    shard_timeout_s: float = 1800.0
    cluster: str = "local"  # local | debug | slurm (configs/cluster/<name>.yaml)
    # Per-benchmark key=value overrides of configs/benchmarks/<name>.yaml, e.g.
    # {ds1000: ["options.python=null"]}; they enter the shard ids like the rest of the benchmark config.
    benchmark_overrides: dict[str, list[str]] = field(default_factory=dict)
    ray: RayConfig = field(default_factory=RayConfig)
    granularity: str = "sentence"  # arrival unit: sentence | word | chars (segment_chars each)
    segment_chars: int = 40
    typing: TypingConfig = field(default_factory=TypingConfig)
    # Typos corrected after a delay: intermediate states that are not prefixes (off at typo_rate 0; only
    # then out of every cell id and fingerprint)
    corrections: CorrectionsConfig = field(default_factory=CorrectionsConfig)
    # Model actors show the libraries' loading progress bars (transformers' "Loading weights", the GGUF
    # conversion, huggingface_hub); off: the console shows the grid's own progress and the summary
    verbose: bool = False
    # Folders of lm-evaluation-harness task YAMLs, as lm-eval's --include_path: `benchmarks=[lm_eval:TASK]`
    # finds TASK there first, then among lm-eval's built-in tasks (docs/benchmarks.md, "lm-eval tasks")
    lm_eval_include_path: str = ""


@dataclass(frozen=True)
class ClusterConfig:
    """Where the grid's driver runs (``configs/cluster/<name>.yaml``)."""

    name: str = "local"
    executor: str = "local"  # local | debug | slurm
    partition: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_type: str | None = None  # Slurm constraint, e.g. a100 or a6000
    # A rehearsal on fake GPUs (the test cluster of .ci/slurm.sh): a model actor that holds a GPU but finds
    # no CUDA runs its model on CPU, logged and recorded in the runs row; false: it refuses (jobs/actors.py)
    rehearsal: bool = False
    cpus_per_task: int = 2
    mem_gb: int = 16
    timeout_min: int = 60
    account: str | None = None
    qos: str | None = None
    max_requeues: int = 3
    log_dir: str = "results/slurm_logs"
    setup: list[str] = field(default_factory=list)  # shell lines run before the job (module load ...)
    # The accelerator of each GPU, for the GPU-hour estimate and automatic shard sizes (streamgen/sizing/devices.py):
    # one of DEVICE_NAMES; null: `cpu` (this machine's measured row)
    device: str | None = None


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


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
    raise_if_problems(config_checks.override_path_problems(schema, overrides), "bad command-line overrides")
    try:
        merged = OmegaConf.merge(base, *layers)
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except TypeError as exc:  # a container where the schema has a scalar or the other way round
        raise ConfigError([f"{exc} while merging {list(overrides)}: a list is set whole (key=[a,b]), a "
                           f"mapping key by key (key.sub=value); {schema.__name__}'s fields are "
                           f"{', '.join(config_checks.field_names(schema))}"]) from exc
    except OmegaConfBaseException as exc:
        msg = str(exc).splitlines()[0]
        key = getattr(exc, "full_key", None)
        hint = f" (key '{key}')" if key else ""
        accepted = config_checks.accepted_keys(schema, str(key)) if key else f"see {schema.__name__}'s fields"
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


# --------------------------------------------------------------------------------------------
# Validation: collect every problem, raise once
# --------------------------------------------------------------------------------------------


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
    # benchmark_overrides for benchmarks outside this run are ignored (jobs.plan logs them once)
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
    p.extend(config_checks.value_problems(
        max_new_tokens=grid.max_new_tokens, shard_timeout_s=grid.shard_timeout_s, cluster=grid.cluster,
        object_store_mb=grid.ray.object_store_mb, num_cpus=grid.ray.num_cpus, num_gpus=grid.ray.num_gpus))
    p.extend(config_checks.list_problems({
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


def grid_benchmark_config(grid: GridConfig, name: str) -> BenchmarkConfig:
    """The benchmark's config as this grid runs it (its ``benchmark_overrides`` applied)."""
    if name.startswith(LM_EVAL_PREFIX):
        return lm_eval_benchmark_config(name, grid.lm_eval_include_path, list(grid.benchmark_overrides.get(name, [])))
    return benchmark_config(name, list(grid.benchmark_overrides.get(name, [])))


def raise_if_problems(problems: Sequence[str], title: str = "invalid configuration") -> None:
    if problems:
        raise ConfigError(problems, title)
