"""Run test programs in the sandbox and turn the results into :class:`Score` verdicts.

An ``error`` result means the sandbox itself failed (not the program): the sandbox pool
(``streamgen.scoring.pool.run_many``) retries it up to ``retries`` times, then it is reported with
status ``error`` (never counted as a failed answer). Programs never run in this process.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.benchmarks.base import Score
from streamgen.config import REPO_ROOT, BenchmarkConfig, ConfigError
from streamgen.scoring.metrics import pass_at_1

DETAIL_CHARS = 2000


@dataclass(frozen=True)
class Runner:
    """How a benchmark's programs run: time limit, interpreter, memory, retries on sandbox errors."""

    timeout_s: float
    python: str | None = None  # None: the current interpreter
    memory_bytes: int = 2 << 30
    retries: int = 2
    backend: str | None = None  # None: the strongest usable sandbox backend

    @classmethod
    def from_config(cls, cfg: BenchmarkConfig) -> Runner:
        """From ``timeout_s`` and ``options.python`` / ``options.memory_gb`` /
        ``options.sandbox_backend`` of the benchmark.

        Raises :class:`ConfigError` when the configured interpreter does not exist.
        """
        python = cfg.options.get("python")
        memory_gb = float(cfg.options.get("memory_gb", 2))
        return cls(timeout_s=float(cfg.timeout_s), python=resolve_python(cfg.name, python),
                   memory_bytes=int(memory_gb * (1 << 30)),
                   backend=resolve_backend(cfg.name, cfg.options.get("sandbox_backend")))

    def run_one(self, program: str) -> Score:
        return self.run_many([program])[0]

    def run_many(self, programs: Sequence[str], workers: int = 1) -> list[Score]:
        """Scores of ``programs`` in order, ``workers`` sandboxes at once (the sandbox pool retries
        ``error`` results ``retries`` times; one still ``error`` stays ``error``)."""
        from streamgen.scoring.pool import run_many

        results = run_many(list(programs), timeout_s=self.timeout_s, workers=max(1, workers),
                           python=self.python, retries=self.retries, memory_bytes=self.memory_bytes,
                           backend=self.backend)
        return [to_score(r) for r in results]


def resolve_python(benchmark: str, python: str | None) -> str | None:
    """An interpreter path from a config (relative paths are relative to the repository root)."""
    if not python:
        return None
    path = Path(os.path.expanduser(python))
    path = path if path.is_absolute() else REPO_ROOT / path
    if not path.exists():
        raise ConfigError([f"benchmark {benchmark}: options.python={python!r} does not exist ({path}); "
                           "build it (DS-1000: bash scripts/ds1000_env.sh) or use the current interpreter: "
                           f"benchmark_overrides.{benchmark}=[options.python=null] on the grid's command "
                           f"line (`python -m streamgen.benchmarks check {benchmark} options.python=null`)"])
    return str(path)


def resolve_backend(benchmark: str, backend: str | None) -> str | None:
    """A configured sandbox backend, checked usable here (None: the strongest usable one)."""
    if backend is None:
        return None
    from streamgen.scoring.sandbox import available_backends

    if backend not in available_backends():
        raise ConfigError([f"benchmark {benchmark}: options.sandbox_backend={backend!r} does not work "
                           f"here (usable: {list(available_backends())}); install bubblewrap, or drop "
                           "the option to use the strongest usable backend"])
    return backend


def to_score(result: Any) -> Score:
    """A sandbox ``ExecutionResult`` as a :class:`Score` (quality 0.0 and status error when no verdict)."""
    detail = (result.stderr or result.detail or "")[-DETAIL_CHARS:]
    quality = 0.0 if result.status == "error" else pass_at_1(result.status)
    return Score(quality=quality, status=result.status, detail=detail, backend=str(result.backend),
                 view=result.view or None)
