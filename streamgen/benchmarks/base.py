"""What a benchmark is to the grid: an :class:`Example`, a :class:`Score`, the :class:`Benchmark` protocol.

A leaf of the benchmarks package: the benchmark modules import it (never the package itself), so
``streamgen/benchmarks/__init__.py`` can list them explicitly without an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from streamgen.config import BenchmarkConfig
from streamgen.requests.chat import Message

STOP_STRINGS = "stop_strings"
"""``BenchmarkConfig.options`` key: strings after whose completion every decode of the benchmark stops
(an lm-eval task's ``until``); absent for the other benchmarks, so their shard ids stay as they were."""


def stop_strings(cfg: BenchmarkConfig) -> tuple[str, ...]:
    """The benchmark's stop strings (``options.stop_strings``); none for most benchmarks."""
    value = cfg.options.get(STOP_STRINGS) or ()
    return (value,) if isinstance(value, str) else tuple(str(s) for s in value)


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


def score_columns(base: Score | None, stream: Score | None, scorer_version: str | None) -> dict[str, Any]:
    """The pairs (and scores) columns two answers' scores fill: qualities, statuses, the sandbox that
    ran them, the scorer version (None when neither side was scored) — one place for the grid's row
    builder and ``analysis.rescore``."""
    scores = (base, stream)
    return {
        "base_quality": base.quality if base else None, "stream_quality": stream.quality if stream else None,
        "base_score_status": base.status if base else None, "stream_score_status": stream.status if stream else None,
        "sandbox_backend": next((s.backend for s in scores if s is not None and s.backend), None),
        "sandbox_view": next((s.view for s in scores if s is not None and s.view), None),
        "scorer_version": scorer_version if base or stream else None,
    }


@runtime_checkable
class Benchmark(Protocol):
    """What the grid needs from a benchmark."""

    @property
    def cfg(self) -> BenchmarkConfig:
        """The benchmark's YAML as loaded (read-only: the benchmarks are frozen dataclasses)."""
        ...

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

    @property
    def scorer_version(self) -> str:
        """The version of everything that turns an answer into its score (``mbpp:1+code:1``): stored
        on every scored row, so a changed scorer is never mixed silently with old scores."""
        ...

    def score(self, example: Example, answer: str) -> Score:
        """Score one answer (code runs in the sandbox; never in this process)."""
        ...

    def score_many(self, examples: Sequence[Example], answers: Sequence[str], *,
                   workers: int = 1) -> list[Score]:
        """Score many answers, in parallel where that helps (the sandbox pool)."""
        ...
