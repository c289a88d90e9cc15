"""Benchmarks as data plus a few named functions: load, render the request, segment, score.

Each benchmark is ``configs/benchmarks/<name>.yaml`` (version, module, prompt template, answer
extraction, metric, data source) plus one module here whose ``build(cfg)`` returns a
:class:`Benchmark`. Nothing outside that module knows which benchmark it is running.

``load_benchmark(benchmark_config("humaneval"))`` → ``.examples(data_dir, limit)`` →
``.segments(example)`` → (decoding elsewhere) → ``.score(example, answer)``.

Exclusions (paper §4) are decided with :func:`exclusion_reason` (a request of one segment: nothing
to stream) before decoding and :func:`empty_answer_reason` after it; both become rows with a reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from streamgen.config import BenchmarkConfig, ConfigError, raise_if_problems, validate_benchmark
from streamgen.decoding.base import Message

__all__ = ["Benchmark", "BenchmarkDataError", "Example", "Score", "SINGLE_SEGMENT", "EMPTY_ANSWER",
           "empty_answer_reason", "exclusion_reason", "load_benchmark"]

SINGLE_SEGMENT = "single_segment"
"""``excluded_reason`` of a request that is one segment long (nothing to stream)."""
EMPTY_ANSWER = "empty_answer"
"""``excluded_reason`` prefix of an example where the base or the stream answer is empty."""


class BenchmarkDataError(RuntimeError):
    """Benchmark data is missing or malformed; the message names the file and the fix."""


@dataclass(frozen=True)
class Example:
    """One benchmark item, rendered: what the user has typed and what a good answer is.

    ``history``: earlier chat turns, always fully present. ``request``: the final user turn, the
    text that is segmented and streamed. ``reference``: the gold answer as a chat answer would give
    it (a fenced program for code benchmarks). ``payload``: what the scorer needs (tests, entry
    point, ...). ``system_prompt``: the benchmark's answer-format instruction, kept out of the
    streamed request so the last segment is real content.
    """

    benchmark: str
    example_id: str
    history: tuple[Message, ...]
    request: str
    reference: str
    payload: Mapping[str, Any] = field(default_factory=dict, compare=False)
    system_prompt: str | None = None

    def messages(self, prefix: str | None = None) -> list[Message]:
        """Chat messages: system prompt, history, then the request (or a prefix of it)."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        user = {"role": "user", "content": self.request if prefix is None else prefix}
        return [*system, *self.history, user]


@dataclass(frozen=True)
class Score:
    """The verdict on one answer.

    ``quality`` in [0, 1]: pass@1 (1.0 passed, 0.0 otherwise) or token F1. ``status``: ``passed``,
    ``failed``, ``timeout``, ``error`` (the sandbox could not run it after retries; not a verdict,
    quality is then meaningless) or ``f1``. ``detail``: why (the tail of stderr, how code was
    extracted). ``backend``: the sandbox backend, or None when nothing ran; ``view``: what the
    program could see (``streamgen.scoring.sandbox.view_name``), or None when nothing ran.
    """

    quality: float
    status: str
    detail: str = ""
    backend: str | None = None
    view: str | None = None


@runtime_checkable
class Benchmark(Protocol):
    """What the grid needs from a benchmark."""

    cfg: BenchmarkConfig

    def examples(self, data_dir: Path | None = None, limit: int | None = None) -> list[Example]:
        """The first ``limit`` examples (all when None), in the data's order, rendered."""
        ...

    def segments(self, example: Example) -> list[str]:
        """The request cut into arrival units (lossless)."""
        ...

    def problems(self) -> list[str]:
        """What would stop scoring (e.g. a configured interpreter that is missing), each naming
        the fix; empty when ready. Cheap: for up-front grid validation."""
        ...

    def reference_answer(self, example: Example) -> str:
        """The gold answer, shaped like a chat answer (what ``check`` feeds the scorer)."""
        ...

    def score(self, example: Example, answer: str) -> Score:
        """Score one answer (code runs in the sandbox; never in this process)."""
        ...

    def score_many(self, examples: Sequence[Example], answers: Sequence[str], *,
                   workers: int = 1) -> list[Score]:
        """Score many answers, in parallel where that helps (the sandbox pool)."""
        ...


def exclusion_reason(example: Example, segments: Sequence[str]) -> str | None:
    """Why ``example`` is excluded before decoding, or None (paper §4: one segment, nothing to stream)."""
    del example  # the rule does not depend on the benchmark; kept for a uniform call site
    if len(segments) <= 1:
        return SINGLE_SEGMENT
    return None


def empty_answer_reason(base_answer: str | None, stream_answer: str | None) -> str | None:
    """Why an example is excluded after decoding, or None: an empty answer on either side
    (paper §4) excludes the example from all columns alike."""
    empty = [side for side, ans in (("base", base_answer), ("stream", stream_answer)) if not (ans or "").strip()]
    if not empty:
        return None
    return f"{EMPTY_ANSWER}:{'+'.join(empty)}"


def load_benchmark(cfg: BenchmarkConfig) -> Benchmark:
    """The benchmark named by ``cfg.module`` (``streamgen.benchmarks.<module>.build(cfg)``)."""
    raise_if_problems(validate_benchmark(cfg), f"benchmark {cfg.name or '?'}")
    try:
        module = importlib.import_module(f"{__name__}.{cfg.module}")
    except ModuleNotFoundError as exc:
        raise ConfigError([f"benchmark {cfg.name}: module={cfg.module!r} is not a module under "
                           f"streamgen/benchmarks/ ({exc})"]) from exc
    build = getattr(module, "build", None)
    if build is None:
        raise ConfigError([f"benchmark {cfg.name}: streamgen.benchmarks.{cfg.module} has no build(cfg)"])
    bench: Benchmark = build(cfg)
    return bench
