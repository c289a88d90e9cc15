"""Benchmarks as data plus a few named functions: load, render the request, segment, score.

Each benchmark is ``configs/benchmarks/<name>.yaml`` (version, module, prompt template, answer
extraction, metric, data source) plus one module here whose ``build(cfg)`` returns a
:class:`Benchmark`; :data:`BUILDERS` lists those modules explicitly (a YAML's ``module:`` is a key
of it), or ``module: data`` with the rows' fields and a scorer declared in the YAML and no Python
(:mod:`streamgen.benchmarks.from_data`). Nothing outside that module knows which benchmark it is running.

``load_benchmark(benchmark_config("humaneval"))`` → ``.examples(data_dir, limit)`` →
``.segments(example)`` → (decoding elsewhere) → ``.score(example, answer)``.

The vocabulary (:class:`Example`, :class:`Score`, :class:`Benchmark`) lives in the leaf
:mod:`streamgen.benchmarks.base`; exclusions (paper §4) in :mod:`streamgen.exclusions`: one segment
before decoding, an empty answer after it; both become rows with a reason. All are re-exported here.

Modules:

    base.py            Example, Score, BenchmarkDataError, the Benchmark protocol (a leaf the benchmark modules import)
    __main__.py        python -m streamgen.benchmarks check BENCHMARK | stats | verify
    sources.py         benchmark rows from the local data directory or a configured hub dataset
    data_manifest.py   MANIFEST.tsv: every data file's source, licence, sha256; checked on read; data version
    code_benchmark.py  shared shape of execution-scored benchmarks
    text_benchmark.py  shared shape of F1- (or exact-match-) scored benchmarks
    execution.py       test programs through the sandbox pool → Score verdicts
    from_data.py       a benchmark from data alone (module: data; HumanEval): rows → examples, the chosen scorer
    data_spec.py       a data benchmark's YAML keys (id, references, scorer, tests), checked into one ConfigError
    lm_eval_task.py    lm_eval:TASK: an lm-evaluation-harness generate_until task (its prompt, filters, metrics) as a benchmark
    lm_eval_checks.py  finding an lm-eval task and refusing hub data, code-executing and non-mean metrics before its data loads
    mbpp.py            MBPP, full (974) or sanitized (427)
    canitedit.py       CanItEdit: the program first, then the (descriptive or lazy) instruction
    ds1000.py          DS-1000: data-science completions with the upstream test harness
    coedit.py          CoEdIT (offline: the JFLEG stand-in), token F1
    chat.py            multi-turn chat (MT-Bench turn 1 + reference as history, turn 2 streamed), token F1
    check.py           reference answers through the real scorer
    stats.py           segments per request and the single-segment share
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from streamgen.benchmarks import canitedit, chat, coedit, ds1000, from_data, lm_eval_task, mbpp
from streamgen.benchmarks.base import Benchmark, BenchmarkDataError, Example, Score
from streamgen.config import BenchmarkConfig, ConfigError, raise_if_problems, validate_benchmark
from streamgen.exclusions import EMPTY_ANSWER, SINGLE_SEGMENT, empty_answer_reason, exclusion_reason

__all__ = ["BUILDERS", "Benchmark", "BenchmarkDataError", "Example", "Score", "SINGLE_SEGMENT", "EMPTY_ANSWER",
           "empty_answer_reason", "exclusion_reason", "load_benchmark"]

BUILDERS: Mapping[str, Callable[[BenchmarkConfig], Benchmark]] = MappingProxyType({
    "canitedit": canitedit.build, "chat": chat.build, "coedit": coedit.build, "data": from_data.build,
    "ds1000": ds1000.build, "lm_eval": lm_eval_task.build, "mbpp": mbpp.build,
})
"""A benchmark YAML's ``module:`` → that module's ``build(cfg)``; ``data``: a benchmark from data alone
(:mod:`streamgen.benchmarks.from_data`, no module of its own); ``lm_eval``: an lm-evaluation-harness task,
``benchmarks=[lm_eval:TASK]`` (:mod:`streamgen.benchmarks.lm_eval_task`)."""


def load_benchmark(cfg: BenchmarkConfig) -> Benchmark:
    """The benchmark ``cfg.module`` names, built from ``cfg`` (``BUILDERS[cfg.module](cfg)``)."""
    raise_if_problems(validate_benchmark(cfg), f"benchmark {cfg.name or '?'}")
    if cfg.module not in BUILDERS:
        raise ConfigError([f"benchmark {cfg.name}: module={cfg.module!r} is not a module under streamgen/benchmarks/ "
                           f"that builds a benchmark; use one of {tuple(BUILDERS)}"])
    return BUILDERS[cfg.module](cfg)
