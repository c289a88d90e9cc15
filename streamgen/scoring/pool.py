"""Parallel scoring: run many programs through the sandbox on CPU workers, results in input order.

Each worker thread only waits on its sandboxed subprocess, so threads (not processes) are enough;
`workers` is the number of programs running at once and should not exceed the CPU cores given to
scoring. A result with status ``error`` (the sandbox failed, not the program) is retried up to
`retries` more times; the final result records the attempts made.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from streamgen.scoring.sandbox import ExecutionResult, SandboxError, execute

logger = logging.getLogger(__name__)

__all__ = ["SandboxJob", "run_many"]


@dataclass(frozen=True)
class SandboxJob:
    """One program with its own extra files and standard input (plain strings also work)."""

    program: str
    files: Mapping[str, str] | None = None
    stdin: str | None = None


def run_many(programs: Sequence[str | SandboxJob], *, timeout_s: float, workers: int | None = None,
             python: str | None = None, retries: int = 2, retry_backoff_s: float = 0.2,
             on_result: Callable[[int, ExecutionResult], None] | None = None,
             **execute_kwargs: Any) -> list[ExecutionResult]:
    """Sandbox every program with `workers` running at once; returns results in input order.

    `execute_kwargs` go to `sandbox.execute` (backend, memory_bytes, max_processes, ...).
    `on_result(index, result)` is called from a worker thread as each program finishes.
    """
    workers = workers if workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise SandboxError(f"workers must be at least 1, got {workers}")
    if retries < 0:
        raise SandboxError(f"retries must be >= 0, got {retries}")
    jobs = [p if isinstance(p, SandboxJob) else SandboxJob(p) for p in programs]

    def one(index: int) -> ExecutionResult:
        result = _with_retries(jobs[index], retries, retry_backoff_s, timeout_s=timeout_s,
                               python=python, **execute_kwargs)
        if on_result is not None:
            on_result(index, result)
        return result

    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs)),
                            thread_name_prefix="sandbox") as pool:
        return list(pool.map(one, range(len(jobs))))


def _with_retries(job: SandboxJob, retries: int, backoff_s: float, **kwargs: Any) -> ExecutionResult:
    for attempt in range(1, retries + 2):
        result = execute(job.program, files=job.files, stdin=job.stdin, **kwargs)
        if result.status != "error":
            break
        logger.warning("sandbox error (attempt %d of %d): %s", attempt, retries + 1, result.detail)
        if attempt <= retries:
            time.sleep(backoff_s * attempt)
    return dataclasses.replace(result, attempts=attempt)
