"""The configuration's schemas: one frozen dataclass per kind of YAML (``configs/models``, ``configs/benchmarks``,
``configs/grid`` and the grid's blocks), each field with its default and unit. The cluster's is
:class:`streamgen.config.cluster.ClusterConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamgen.config.names import POLICIES


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
    # timeout from its estimate instead of shard_timeout_s (jobs/grid/unit_sizing.py, docs/estimate.md)
    shard_size: Any = 4
    max_new_tokens: int | None = None  # None: the benchmark's own
    results_dir: str = "results/local"
    data_dir: str = ""  # empty: $STREAMGEN_DATA_DIR or the repository's data/
    workers: int = 1  # model actors
    score_workers: int = 1
    seed: int = 0
    max_error_fraction: float = 0.1
    # Cells differing only in acceptance/τ run each example's base run and first stream step once
    # (jobs/grid/units.py); rows are the same either way. Not in shard ids or fingerprints.
    share_work: bool = True
    # Each model actor runs one untimed warm-up pair (streamgen/warmup.py) before its first timed pair, so no
    # row's wall clock absorbs CUDA start-up. On no row and in no forward count; not in shard ids or fingerprints.
    warm_up: bool = True
    shard_timeout_s: float = 1800.0
    cluster: str = "local"  # local | debug | slurm | ray (configs/cluster/<name>.yaml)
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
