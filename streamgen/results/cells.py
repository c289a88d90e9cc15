"""The cell: its identity, its settings and their fingerprint, its label — one hash of every setting that can change a cell's results (docs/design.md, 'Vocabulary').

A cell's *name* is (model, benchmark, acceptance, τ, variant, verifier mode); its *fingerprint* also
covers the model's weights and decode settings, the benchmark's version and config, the answer
budget, the example limit, the effective system prompt and ``SCHEMA_VERSION``. Every pairs and steps
row carries the fingerprint (``cell_fingerprint``); pairs rows also carry the settings themselves
(``cell_settings``, flat JSON) so the analysis can say which settings differ between two
fingerprints of one cell name. This module is the only place that decides what enters it.

:class:`Cell` is the one carrier of a cell's identity from the grid to the result rows, and
:func:`cell_label` the one spelling of its name in logs, plans and the nightly comparison.

Also here, because the effective system prompt is part of the fingerprint: how a model's system
prompt and a benchmark's compose (:func:`effective_system_prompt`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from streamgen.acceptance_rules import AcceptanceRule, column_param, extra_params, rule_label
from streamgen.config import (
    DIFFUSION_DEVIATIONS,
    ESTIMATE_ONLY_MODEL_FIELDS,
    BenchmarkConfig,
    CorrectionsConfig,
    ModelConfig,
    TypingConfig,
    result_fields,
)
from streamgen.results.records import SCHEMA_VERSION

HASH_CHARS = 16
RULE_PARAMS_KEY = "acceptance_params"  # identity key of a rule's parameters other than τ and the tie guard
RULE_KEYS = ("acceptance", "tau", "tie_guard", RULE_PARAMS_KEY)  # the identity's acceptance-rule keys
PROMPT_SEPARATOR = "\n\n"


def stable_hash(payload: Any, n: int = HASH_CHARS) -> str:
    """Hex digest of the canonical JSON of ``payload`` (sorted keys, no whitespace)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def effective_system_prompt(model_prompt: str | None, benchmark_prompt: str | None) -> str | None:
    """The model's system prompt (if any), then the benchmark's, joined by a blank line; None if neither."""
    parts = [p for p in (model_prompt, benchmark_prompt) if p]
    return PROMPT_SEPARATOR.join(parts) if parts else None


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """Nested dicts → dotted keys; lists → canonical JSON text (so every value is a JSON scalar)."""
    if isinstance(value, dict):
        for k in sorted(value):
            _flat(f"{prefix}.{k}", value[k], out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = json.dumps(list(value), sort_keys=True, default=str)
    else:
        out[prefix] = value


def config_settings(prefix: str, cfg: Any) -> dict[str, Any]:
    """A model or benchmark config's fields as the flat ``{prefix.field: scalar}`` keys of
    :func:`cell_settings` (name, system prompt and variant are left out: the cell records them as used)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        if f.name not in {"name", "system_prompt", "variant", *ESTIMATE_ONLY_MODEL_FIELDS}:
            _flat(f"{prefix}.{f.name}", getattr(cfg, f.name), out)
    return out


def cell_settings(model: ModelConfig, benchmark: BenchmarkConfig, *, acceptance: str, tau: float | None,
                  verifier_mode: str | None, max_new_tokens: int, limit: int | None,
                  timing: dict[str, Any] | None = None,
                  numerics: dict[str, Any] | None = None,
                  rule_params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every result-defining setting of a cell as a flat ``{key: scalar}`` dict (keys sorted).

    ``rule_params``: the acceptance rule's parameters other than τ and the tie guard
    (``streamgen.acceptance_rules.extra_params``), as ``acceptance.*`` keys; none for greedy and threshold.
    ``timing``: the cell's non-default segmentation and live-typing settings (``jobs.grid.shards.Cell.timing``);
    absent keys keep the fingerprints of cells run with the defaults unchanged. ``numerics``: the
    numerics block (:func:`numerics_settings`), as ``numerics.*`` keys."""
    out: dict[str, Any] = {
        "model": model.name, "benchmark": benchmark.name, "acceptance": acceptance, "tau": tau,
        "verifier_mode": verifier_mode, "max_new_tokens": int(max_new_tokens), "limit": limit,
        "variant": model.variant, "schema_version": SCHEMA_VERSION,
        "system_prompt": effective_system_prompt(model.system_prompt, benchmark.system_prompt),
    }
    out.update(config_settings("model", model))
    out.update(config_settings("benchmark", benchmark))
    for key, default in DIFFUSION_DEVIATIONS.get(model.family, {}).items():  # recorded when left at the default
        out.setdefault(f"model.decoding.{key}", default)
    for key, value in (timing or {}).items():
        _flat(f"timing.{key}", value, out)
    for key, value in (numerics or {}).items():
        _flat(f"numerics.{key}", value, out)
    for key, value in (rule_params or {}).items():
        _flat(f"acceptance.{key}", value, out)
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------------------------
# Numerics block of the fingerprint (issue 27): tie_guard and the library versions
# --------------------------------------------------------------------------------------------


def numerics_settings(tie_guard: float | None) -> dict[str, Any]:
    """The fingerprint's numerics block: greedy's ``tie_guard`` when set, and the torch and
    transformers versions (kernels and model code change bfloat16 argmaxes at near ties,
    docs/numerics.md). Read from package metadata, so the driver need not import torch. The dtype is
    already there as ``model.dtype``; device, threads, attention kernel and the backends' flags are
    chosen in the model actor after planning and recorded in ``runs.numerics`` / ``pairs.numerics``."""
    out: dict[str, Any] = dict(_library_versions())
    if tie_guard is not None:
        out["tie_guard"] = float(tie_guard)
    return out


@functools.cache
def _library_versions() -> tuple[tuple[str, str | None], ...]:
    """The torch and transformers versions, read once per process (each read parses the package's
    metadata: ~15 ms, and grid=full plans ~360 cells)."""
    from importlib.metadata import PackageNotFoundError, version

    out: list[tuple[str, str | None]] = []
    for package in ("torch", "transformers"):
        try:
            out.append((package, version(package)))
        except PackageNotFoundError:
            out.append((package, None))
    return tuple(out)


def cell_fingerprint(settings: dict[str, Any]) -> str:
    """The fingerprint of a :func:`cell_settings` dict (16 hex characters)."""
    return stable_hash(settings)


def settings_json(settings: dict[str, Any]) -> str:
    """The settings as the canonical JSON text stored in ``pairs.cell_settings``."""
    return json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)


def cell_label(model: str, benchmark: str, rule: str, verifier_mode: str | None) -> str:
    """The one spelling of a cell's name: ``model / benchmark / threshold τ=0.9 [visible]`` or
    ``… / greedy guard=4`` (the nightly baseline's keys are these labels). ``rule``: the rule's label
    (``streamgen.acceptance_rules.rule_label``, or ``column_label`` of a result row)."""
    mode = f" [{verifier_mode}]" if verifier_mode else ""
    return f"{model} / {benchmark} / {rule}{mode}"


@dataclass(frozen=True)
class Cell:
    """One (model, benchmark, acceptance/τ, verifier mode, decode settings) combination: built once from
    the grid (``jobs.grid.shards.expand_cells``) and carried whole from shard to row (``jobs.run.rows``)."""

    model: ModelConfig
    benchmark: BenchmarkConfig
    rule: AcceptanceRule  # a rule registered in streamgen.acceptance_rules.RULES, with its parameters
    verifier_mode: str | None  # VERIFIER_MODE_FAMILIES only (bidirectional, diffusion_gemma): visible | hidden
    max_new_tokens: int
    limit: int | None = None  # the grid's example limit: in the fingerprint, not in the shard ids
    segmentation: str = "sentence"  # granularity (and chunk size): sentence | word | chars:N
    live: TypingConfig | None = None  # set when the stream runs live (typing.live_policy)
    numerics: dict[str, Any] | None = None  # the fingerprint's numerics block (numerics_settings); None: none
    corrections: CorrectionsConfig | None = None  # typos corrected while typing; None: off (typo_rate 0)

    @property
    def acceptance(self) -> str:
        """The rule's name: the rows' ``acceptance`` column."""
        return self.rule.name

    @property
    def tau(self) -> float | None:
        """The rule's τ (threshold): the rows' ``tau`` column; None for a rule without one."""
        return column_param(self.rule, "tau")

    @property
    def tie_guard(self) -> float | None:
        """The rule's tie guard in dtype spacings (greedy's): the rows' ``tie_guard`` column; None: none."""
        return column_param(self.rule, "tie_guard")

    def timing(self) -> dict[str, Any]:
        """The cell's timing settings, only those not at their default (so default cells keep their ids)."""
        timing: dict[str, Any] = {} if self.segmentation == "sentence" else {"segmentation": self.segmentation}
        if self.live is not None:
            # the population fields are post hoc only (a live grid refuses them): out of the identity
            timing["live"] = {k: v for k, v in dataclasses.asdict(self.live).items()
                              if k not in ("populations", "users", "seed")}
        if self.corrections is not None and self.corrections.enabled:  # absent when off: ids unchanged
            timing["corrections"] = dataclasses.asdict(self.corrections)
        return timing

    def settings(self) -> dict[str, Any]:
        """Every result-defining setting of the cell (``streamgen.results.cells.cell_settings``)."""
        return cell_settings(self.model, self.benchmark, acceptance=self.acceptance, tau=self.tau,
                             verifier_mode=self.verifier_mode, max_new_tokens=self.max_new_tokens,
                             limit=self.limit, timing=self.timing(), numerics=self.numerics,
                             rule_params=extra_params(self.rule))

    @property
    def fingerprint(self) -> str:
        return cell_fingerprint(self.settings())

    def identity(self) -> dict[str, Any]:
        """Everything about the cell that changes its rows (timing keys only when not the default). The
        same dict at every call (built once: the cell is frozen, and planning the study grid asks for it
        ~140,000 times); read it, do not change it."""
        return self._identity

    @functools.cached_property
    def _identity(self) -> dict[str, Any]:
        guard = {"tie_guard": self.tie_guard} if self.tie_guard is not None else {}  # absent: ids unchanged
        extra = {RULE_PARAMS_KEY: extra_params(self.rule)} if extra_params(self.rule) else {}  # likewise
        return {**self.timing(), **guard, **extra,
            "model": result_fields(self.model),
            "benchmark": dataclasses.asdict(self.benchmark),
            "acceptance": self.acceptance,
            "tau": self.tau,
            "verifier_mode": self.verifier_mode,
            "max_new_tokens": self.max_new_tokens,
            "schema_version": SCHEMA_VERSION,
        }

    @functools.cached_property
    def cell_id(self) -> str:
        return stable_hash(self.identity())

    @property
    def label(self) -> str:
        return cell_label(self.model.name, self.benchmark.name, rule_label(self.rule), self.verifier_mode)
