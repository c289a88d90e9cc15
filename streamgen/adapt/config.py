"""The adaptation recipe's schema (``configs/adapt/<name>.yaml``) and its up-front validation.

One recipe names the plain model, where the training requests come from, how pairs are built, the
LoRA and training settings (the paper's §7 defaults), where outputs go and which grid evaluates the
result. ``adapt_config(name, overrides)`` loads it like every other config (schema → YAML →
``key=value``, struct mode); ``validate_adapt`` collects every problem so the workflow raises ONE
:class:`~streamgen.config.ConfigError` before any model is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streamgen.config import (
    ConfigError,
    available,
    benchmark_config,
    configs_dir,
    model_config,
    resolve_data_dir,
    validate_model,
)
from streamgen.config.loading import _named

SOURCE_KINDS = ("benchmark", "rows")
TARGETS = ("teacher", "corpus")
PAIR_VARIANTS = ("prefix_to_answer", "draft_refinement")
TRAIN_DEVICES = ("cpu", "cuda", "auto")
AUTOCASTS = ("none", "bf16")

INCOMPLETE_REQUEST_PROMPT = (
    "The user may still be typing: their message can stop mid-request. Answer it as if it were "
    "complete, committing now to the answer you would give to the full request."
)
"""The system message of an adapted autoregressive model (following PredGen, Li and Grover 2025)."""


@dataclass(frozen=True)
class SourceSettings:
    """Where training requests come from (never an evaluation split: see ``streamgen.adapt.leakage``)."""

    kind: str = "benchmark"  # benchmark: rendered by a benchmark module as the grid renders it; rows: raw
    benchmark: str = "mbpp"  # kind=benchmark: configs/benchmarks/<name>.yaml, with the overrides below
    benchmark_overrides: list[str] = field(
        default_factory=lambda: ["data_file=train/mbpp_train.jsonl", "options.split=train"])
    data_file: str = ""  # kind=rows: relative to the data directory
    hub_id: str | None = None  # kind=rows: a hub dataset instead of a file (whose terms the user accepts)
    hub_config: str | None = None
    hub_split: str | None = None
    request_field: str = "text"  # kind=rows: dotted path into a row (conversation.0.content)
    answer_field: str | None = None  # kind=rows: the corpus answer (needed for pairs.target=corpus)
    id_field: str = "id"
    system_prompt: str | None = None  # kind=rows: the requests' own system message
    limit: int | None = None  # requests (None: all)
    data_dir: str = ""  # empty: streamgen.config.resolve_data_dir's default


@dataclass(frozen=True)
class PairSettings:
    target: str = "teacher"  # teacher: the model's own greedy answer to the complete request | corpus
    variant: str = "prefix_to_answer"  # | draft_refinement (input includes the draft held at the prefix)
    include_complete: bool = True  # also the complete request → its answer (keeps full requests intact)
    max_new_tokens: int = 512  # the teacher's answer budget
    draft_template: str = "{prefix}\n\n[Current draft]\n{draft}"  # draft_refinement's user turn


@dataclass(frozen=True)
class LoraSettings:
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass(frozen=True)
class TrainSettings:
    learning_rate: float = 2e-5
    effective_batch: int = 16  # sequences per optimizer step (micro_batch × gradient accumulation)
    micro_batch: int = 1
    max_length: int = 2048  # tokens of prompt + answer; longer pairs are cut from the answer's end
    steps: int = 1000
    warmup_steps: int = 0
    weight_decay: float = 0.0
    seed: int = 0
    save_every: int = 100  # optimizer steps between checkpoints (and at the last step)
    keep_checkpoints: int = 2
    log_every: int = 10
    device: str = "auto"  # cpu | cuda | auto
    threads: int | None = None  # torch CPU threads (None: torch's default)
    autocast: str = "none"  # none | bf16: each micro-batch's forward + loss under torch.autocast(bfloat16);
    # the LoRA weights, their gradients and AdamW's state stay float32 (docs/adaptation.md)


@dataclass(frozen=True)
class OutputSettings:
    dir: str = ""  # empty: results/adapt/<recipe name>
    model_name: str = ""  # the generated configs/models/<model_name>.yaml (empty: <model>-<recipe name>)
    variant: str = ""  # the rows' variant label (empty: <recipe name>-<steps>)
    system_prompt: str = INCOMPLETE_REQUEST_PROMPT
    configs_dir: str = ""  # empty: streamgen.config.configs_dir()


@dataclass(frozen=True)
class EvalSettings:
    grid: str = "adapt"  # configs/grid/<grid>.yaml; the workflow sets models=[plain, adapted]
    overrides: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CurveSettings:
    """The training curve (``streamgen.adapt.curve``): requests held out of training to measure on."""

    heldout: int = 0  # the source's last N requests: never trained on; draft agreement at every checkpoint


@dataclass(frozen=True)
class EstimateSettings:
    """Rates the ``--dry-run`` time estimate uses (measure them on the machine that will run)."""

    teacher_tokens_per_s: float = 15.0  # greedy decoding of teacher answers
    teacher_answer_tokens: int = 0  # expected answer length (0: pairs.max_new_tokens, an upper bound)
    train_s_per_sequence: float = 1.2  # forward + backward of one training sequence (micro-batch share)
    heldout_s_per_pair: float = 0.3  # one no-grad forward of a held-out pair
    eval_s_per_example: float = 6.0  # one (base, stream) pair of runs of the evaluation grid, scoring included


@dataclass(frozen=True)
class AdaptConfig:
    name: str = ""
    model: str = "smollm2"  # the plain model (teacher and base of the adapter): configs/models/<model>.yaml
    cluster: str = "local"  # local | debug | slurm: where the training job runs
    source: SourceSettings = field(default_factory=SourceSettings)
    pairs: PairSettings = field(default_factory=PairSettings)
    lora: LoraSettings = field(default_factory=LoraSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    output: OutputSettings = field(default_factory=OutputSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    curve: CurveSettings = field(default_factory=CurveSettings)
    estimate: EstimateSettings = field(default_factory=EstimateSettings)

    @property
    def out_dir(self) -> Path:
        return Path(self.output.dir or f"results/adapt/{self.name}")

    @property
    def adapted_name(self) -> str:
        return self.output.model_name or f"{self.model}-{self.name}"

    @property
    def variant(self) -> str:
        return self.output.variant or f"{self.name}-{self.train.steps}"

    @property
    def model_configs_dir(self) -> Path:
        return Path(self.output.configs_dir) if self.output.configs_dir else configs_dir() / "models"

    @property
    def data_dir(self) -> Path:
        return resolve_data_dir(self.source.data_dir)


def adapt_config(name: str, overrides: Sequence[str] = ()) -> AdaptConfig:
    """``configs/adapt/<name>.yaml`` + ``key=value`` overrides (unknown keys are errors)."""
    return _named("adapt", AdaptConfig, name, overrides)


def _model_problems(cfg: AdaptConfig) -> list[str]:
    try:
        model = model_config(cfg.model)
    except ConfigError as exc:
        return list(exc.problems)
    p = validate_model(model)
    if model.family != "autoregressive":
        p.append(f"model={cfg.model} is {model.family}: LoRA training here is the causal-LM objective of "
                 "autoregressive models; ReFusion's slot-diffusion objective is not implemented")
    if model.variant is not None:
        p.append(f"model={cfg.model} is already a variant ({model.variant}): adapt its plain model instead")
    return p


def _source_problems(s: SourceSettings) -> list[str]:
    p: list[str] = []
    if s.kind not in SOURCE_KINDS:
        p.append(f"source.kind={s.kind!r} must be one of {SOURCE_KINDS}")
    elif s.kind == "benchmark":
        try:
            benchmark_config(s.benchmark, list(s.benchmark_overrides))
        except ConfigError as exc:
            p.extend(exc.problems)
    elif not (s.data_file or s.hub_id):
        p.append("source.kind=rows needs source.data_file= (under the data directory) or source.hub_id=")
    if s.limit is not None and s.limit < 1:
        p.append(f"source.limit={s.limit} must be ≥ 1 (or null for every request)")
    return p


def _train_problems(t: TrainSettings, lora: LoraSettings) -> list[str]:
    p: list[str] = []
    if lora.rank < 1 or lora.alpha <= 0 or not 0.0 <= lora.dropout < 1.0:
        p.append(f"lora: need rank ≥ 1, alpha > 0, 0 ≤ dropout < 1 (got {lora.rank}, {lora.alpha}, {lora.dropout})")
    if not lora.target_modules:
        p.append("lora.target_modules=[] is empty: e.g. [q_proj,k_proj,v_proj,o_proj] (the attention projections)")
    if t.learning_rate <= 0 or t.steps < 1 or t.save_every < 1 or t.log_every < 1 or t.keep_checkpoints < 1:
        p.append("train: need learning_rate > 0 and steps, save_every, log_every, keep_checkpoints ≥ 1")
    if t.micro_batch < 1 or t.effective_batch < t.micro_batch or t.effective_batch % t.micro_batch:
        p.append(f"train.effective_batch={t.effective_batch} must be a multiple of train.micro_batch={t.micro_batch}")
    if t.max_length < 16:
        p.append(f"train.max_length={t.max_length} is too short for a prompt and an answer (≥ 16)")
    if t.device not in TRAIN_DEVICES:
        p.append(f"train.device={t.device!r} must be one of {TRAIN_DEVICES}")
    if t.autocast not in AUTOCASTS:
        p.append(f"train.autocast={t.autocast!r} must be one of {AUTOCASTS} (none: float32 throughout)")
    return p


def _output_problems(cfg: AdaptConfig) -> list[str]:
    p: list[str] = []
    name = cfg.adapted_name
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        p.append(f"output.model_name={name!r}: use letters, digits, '.', '_' and '-' (it names a YAML file)")
    existing = cfg.model_configs_dir / f"{name}.yaml"
    if existing.is_file() and "generated by workflows/adapt.py" not in existing.read_text():
        p.append(f"output.model_name={name!r} would overwrite the hand-written {existing}: choose another name")
    if name == cfg.model:
        p.append("output.model_name equals model=: the adapted model needs its own name")
    return p


def validate_adapt(cfg: AdaptConfig) -> list[str]:
    """Every problem with a recipe and what it names, before anything is loaded."""
    p = _model_problems(cfg) + _source_problems(cfg.source) + _train_problems(cfg.train, cfg.lora)
    p += _output_problems(cfg)
    if cfg.pairs.target not in TARGETS:
        p.append(f"pairs.target={cfg.pairs.target!r} must be one of {TARGETS}")
    if cfg.pairs.target == "corpus" and cfg.source.kind == "rows" and not cfg.source.answer_field:
        p.append("pairs.target=corpus with source.kind=rows needs source.answer_field=")
    if cfg.pairs.variant not in PAIR_VARIANTS:
        p.append(f"pairs.variant={cfg.pairs.variant!r} must be one of {PAIR_VARIANTS}")
    if cfg.pairs.max_new_tokens < 1:
        p.append(f"pairs.max_new_tokens={cfg.pairs.max_new_tokens} must be ≥ 1")
    if not {"{prefix}", "{draft}"} <= set(re.findall(r"\{\w+\}", cfg.pairs.draft_template)):
        p.append("pairs.draft_template must contain {prefix} and {draft}")
    if cfg.curve.heldout < 0:
        p.append(f"curve.heldout={cfg.curve.heldout} must be ≥ 0 (requests held out of training)")
    if cfg.source.limit is not None and cfg.curve.heldout >= cfg.source.limit:
        p.append(f"curve.heldout={cfg.curve.heldout} leaves no training request of source.limit={cfg.source.limit}")
    e = cfg.estimate
    if min(e.teacher_tokens_per_s, e.train_s_per_sequence, e.heldout_s_per_pair, e.eval_s_per_example) <= 0 \
            or e.teacher_answer_tokens < 0:
        p.append("estimate: the rates must be > 0 and teacher_answer_tokens ≥ 0")
    if cfg.eval.grid not in available("grid"):
        p.append(f"eval.grid={cfg.eval.grid!r} unknown: known are {', '.join(available('grid'))}")
    if cfg.cluster not in available("cluster"):
        p.append(f"cluster={cfg.cluster!r} unknown: known are {', '.join(available('cluster'))}")
    return p
