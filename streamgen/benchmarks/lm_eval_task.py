"""An lm-evaluation-harness generation task as a benchmark of the grid (``benchmarks=[lm_eval:TASK]``).

The task is lm-eval's own: :class:`lm_eval.tasks.TaskManager` finds its YAML (``lm_eval_include_path``
first, lm-eval's built-in folder only when the task is not there), and the task object builds every
piece the way lm-eval does: the prompt (``fewshot_context``: ``doc_to_text``, the few-shot examples
and their separators, the description and system instruction, ``apply_chat_template`` and
``fewshot_as_multiturn``), the generation settings (``until``: where every decode stops, as lm-eval's
models stop; ``max_gen_toks``: the answer budget) and the score (the
filter ensemble, ``process_results``, the metric's aggregation). This module only says which part of
that prompt streams: the document's own text (``doc_to_text(doc)``), the tail of the last user turn;
everything before it — the system turn, few-shot turns (multi-turn) or the few-shot block in front of
the document (single-turn) — is present in full from the first step (docs/benchmarks.md, "lm-eval tasks").

Before any data is read, :mod:`streamgen.benchmarks.lm_eval_checks` refuses what the grid cannot run
honestly: hub data (offline by design), code-executing metrics (outside the sandbox), corpus-level or
lower-is-better metrics (the report averages per-example quality).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamgen.benchmarks.base import STOP_STRINGS, Benchmark, BenchmarkDataError, Example, Score
from streamgen.benchmarks.lm_eval_checks import (
    INSTALL_HINT,
    LoadedTask,
    load_task,
    metric_problems,
    task_fingerprint,
)
from streamgen.config import LM_EVAL_UNRESOLVED as UNRESOLVED
from streamgen.config import BenchmarkConfig, ConfigError
from streamgen.requests.chat import Message
from streamgen.requests.segment import segment

logger = logging.getLogger(__name__)

FEWSHOT_SEED = 1234
"""lm-eval's default ``fewshot_random_seed`` (``simple_evaluate``): the same seed draws the same examples."""
DEFAULT_MAX_GEN_TOKS = 256
"""lm-eval's answer budget when a task's ``generation_kwargs`` give no ``max_gen_toks``."""
PREFIX_CHARS = "prefix_chars"
"""``Example.payload`` key: characters at the start of the request that are few-shot context, not the document."""


@dataclass(frozen=True)
class Prompt:
    """One document's prompt as lm-eval renders it, cut where the document's own text begins."""

    system: str | None
    history: tuple[Message, ...]
    request: str  # the last user turn: few-shot block (single-turn) + the document's own text
    prefix_chars: int  # len of the few-shot block in front of the document's text


def _capture(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """A ``chat_template`` for ``fewshot_context`` that returns the messages themselves, as JSON."""
    del add_generation_prompt  # the model's own template adds it when the grid renders the turns
    return json.dumps(messages)


def prompt_of(loaded: LoadedTask, doc: Mapping[str, Any], options: Mapping[str, Any]) -> Prompt:
    """The prompt of ``doc`` built by the task's ``fewshot_context`` with the run's chat settings."""
    task, chat = loaded.task, bool(options.get("apply_chat_template", False))
    context = task.fewshot_context(
        doc, num_fewshot(loaded, options), system_instruction=options.get("system_instruction"),
        apply_chat_template=chat, fewshot_as_multiturn=bool(options.get("fewshot_as_multiturn", True)),
        chat_template=_capture if chat else None)
    turns: list[Message] = json.loads(context) if chat else [{"role": "user", "content": context}]
    system = turns[0]["content"] if turns[0]["role"] == "system" else None
    history, last = tuple(turns[1 if system is not None else 0:-1]), turns[-1]
    own = task.doc_to_text(doc)
    if last["role"] != "user" or not isinstance(own, str) or not last["content"].endswith(own):
        raise ConfigError([f"{loaded.where}: lm-eval's prompt does not end with the document's own text "
                           f"(doc_to_text) in a user turn, so the streamed part cannot be found; streamgen runs "
                           "generate_until tasks without gen_prefix"])
    return Prompt(system, history, last["content"], len(last["content"]) - len(own))


def num_fewshot(loaded: LoadedTask, options: Mapping[str, Any]) -> int:
    """``options.num_fewshot`` if set, else the task's ``num_fewshot`` (0 when it has none)."""
    n = options.get("num_fewshot")
    return int(n if n is not None else (loaded.task.config.num_fewshot or 0))


def max_gen_toks(loaded: LoadedTask) -> int:
    return int((loaded.task.config.generation_kwargs or {}).get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))


def until(loaded: LoadedTask) -> list[str]:
    """The task's stop strings (``generation_kwargs.until``)."""
    value = (loaded.task.config.generation_kwargs or {}).get("until") or []
    return [value] if isinstance(value, str) else list(value)


def resolved(cfg: BenchmarkConfig, loaded: LoadedTask) -> BenchmarkConfig:
    """``cfg`` as the task defines it: version ``<task version>+<8 hex of its YAML folder>.<8 hex of its
    data>``, metric ``<metric>,<filter>`` (lm-eval's result key), ``max_new_tokens`` its ``max_gen_toks``,
    ``options.stop_strings`` its ``until`` (the decoders stop there: :func:`streamgen.benchmarks.base.stop_strings`;
    in the cell's fingerprint, so a task's cells differ from those measured before the decoders stopped)."""
    version = f"{loaded.version}+{task_fingerprint(loaded)}"
    metric = cfg.metric or f"{loaded.metrics[0]},{loaded.filters[0]}"
    options = {**cfg.options, STOP_STRINGS: until(loaded)}
    return dataclasses.replace(cfg, version=version, metric=metric, max_new_tokens=max_gen_toks(loaded),
                               options=options)


def task_version(cfg: BenchmarkConfig) -> str:
    """The version an ``lm_eval:TASK`` config runs as: its own once resolved (the benchmark checked it
    against the files when it loaded), else read from the task's files now (``analysis.rescore``)."""
    return cfg.version if cfg.version != UNRESOLVED else LmEvalBenchmark(cfg).cfg.version


@dataclass
class _Cache:
    """The task, loaded on first use (a worker that only needs the scorer version never loads it)."""

    loaded: LoadedTask | None = None


@dataclass(frozen=True)
class LmEvalBenchmark:
    """A :class:`~streamgen.benchmarks.Benchmark` over one lm-eval ``generate_until`` task."""

    given: BenchmarkConfig
    _cache: _Cache = field(default_factory=_Cache, compare=False, repr=False)

    def _task(self) -> LoadedTask:
        if self._cache.loaded is None:
            loaded = load_task(self.given)
            cfg = resolved(self.given, loaded)
            problems = metric_problems(loaded, cfg.metric)
            if self.given.version != UNRESOLVED and self.given.version != cfg.version:
                problems.append(f"{loaded.where}: the task's YAML or data changed since the grid was planned "
                                f"(version {self.given.version!r} then, {cfg.version!r} now); plan the grid again")
            if problems:
                raise ConfigError(problems, f"benchmark {self.given.name}: cannot run")
            self._cache.loaded = loaded
        return self._cache.loaded

    @property
    def cfg(self) -> BenchmarkConfig:
        """The config as the task defines it (:func:`resolved`): what cells and rows carry."""
        return self.given if self.given.version != UNRESOLVED else resolved(self.given, self._task())

    def examples(self, data_dir: Path | None = None, limit: int | None = None) -> list[Example]:
        del data_dir  # the task's YAML names its own files
        loaded = self._task()
        loaded.task.set_fewshot_seed(seed=FEWSHOT_SEED)  # as simple_evaluate: the sampler draws in doc order
        docs = list(loaded.task.eval_docs)
        out = []
        for doc_id, doc in enumerate(docs[:limit] if limit is not None else docs):
            p = prompt_of(loaded, doc, self.given.options)
            target = loaded.task.doc_to_target(doc)
            out.append(Example(
                benchmark=self.given.name, example_id=str(doc_id), history=p.history, request=p.request,
                reference=str(target[0] if isinstance(target, list) else target),
                payload={"doc": doc, PREFIX_CHARS: p.prefix_chars}, system_prompt=p.system))
        return out

    def segments(self, example: Example) -> list[str]:
        """The document's own text by sentence; the few-shot block in front of it joins the first segment,
        so it is present in full from the first step."""
        cut = int(example.payload[PREFIX_CHARS])
        segs = segment(example.request[cut:])
        return [example.request[:cut] + segs[0], *segs[1:]] if segs else [example.request]

    def problems(self) -> list[str]:
        return []  # scoring runs in process: lm-eval's filters and metrics, no code execution

    def reference_answer(self, example: Example) -> str:
        return example.reference

    @property
    def scorer_version(self) -> str:
        """``lm_eval:<task>@<version>/<metric>+lm_eval-<package version>``."""
        from importlib.metadata import version

        cfg = self.cfg
        return f"lm_eval:{cfg.options.get('task')}@{cfg.version}/{cfg.metric}+lm_eval-{version('lm_eval')}"

    def score(self, example: Example, answer: str) -> Score:
        """The answer cut at ``until`` (as lm-eval's models cut theirs), through the metric's filter
        ensemble and the task's ``process_results``; quality is the metric's value."""
        from lm_eval.api.instance import Instance
        from lm_eval.models.utils import postprocess_generated_text

        loaded = self._task()
        metric, filter_name = self.cfg.metric.split(",", 1)
        doc = example.payload["doc"]
        instance = Instance(request_type="generate_until", doc=doc, arguments=("", {}), idx=0,
                            metadata=(loaded.name, int(example.example_id), 1))
        instance.resps = [postprocess_generated_text(answer, until(loaded), None)]
        # the task's own filter ensembles (lm-eval's Task.apply_filters runs the same list over all instances)
        ensemble = next(f for f in loaded.task._filters if f.name == filter_name)
        ensemble.apply([instance])
        filtered = instance.filtered_resps[filter_name]
        value = float(loaded.task.process_results(doc, [filtered])[metric])
        if not 0.0 <= value <= 1.0:
            raise BenchmarkDataError(f"{loaded.where}: metric {metric} gave {value} for example "
                                     f"{example.example_id}; the grid's quality is a fraction in [0, 1]")
        status = "passed" if value == 1.0 else "failed" if value == 0.0 else "scored"
        return Score(quality=value, status=status, detail=f"[{filter_name}] {str(filtered)[:200]}", backend=None)

    def score_many(self, examples: Sequence[Example], answers: Sequence[str], *, workers: int = 1) -> list[Score]:
        del workers  # in process: filters and metrics are cheap
        return [self.score(e, a) for e, a in zip(examples, answers, strict=True)]


def build(cfg: BenchmarkConfig) -> Benchmark:
    """The task ``cfg.options.task`` names; lm-eval is imported here (an optional extra)."""
    try:
        import lm_eval  # noqa: F401
    except ImportError as exc:
        raise ConfigError([f"benchmark {cfg.name}: needs lm-evaluation-harness ({exc}); {INSTALL_HINT}"]) from exc
    return LmEvalBenchmark(cfg)
