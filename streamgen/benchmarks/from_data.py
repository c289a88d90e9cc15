"""A benchmark from data alone (``module: data``): a JSONL file, a prompt template, a scorer, no Python.

The YAML (:mod:`streamgen.benchmarks.data_spec`) names the id field, the references and one of the
existing scorers; this module turns each row into an :class:`Example` and hands scoring to the
shared shapes every Python benchmark uses: :class:`TextBenchmark` for ``exact`` and ``f1`` (in
process), :class:`CodeBenchmark` for ``code_tests`` (extraction, the test program, the sandbox,
pass@1). The request is ``prompt_template`` over the row's fields and arrives by sentence
(:func:`streamgen.requests.segment.segment`), as for every benchmark.

Scorer version: ``data:<8 hex of the scoring declarations>+<shared part>`` (e.g.
``data:1a2b3c4d+code:1``), so editing the references, the tests field or the program template
re-scores (``analysis.rescore``) instead of mixing old and new verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.benchmarks.base import Benchmark, Example
from streamgen.benchmarks.code_benchmark import CodeBenchmark
from streamgen.benchmarks.data_spec import (
    DataSpec,
    identity_fields,
    parse_spec,
    placeholders,
    row_problems,
    yaml_of,
)
from streamgen.benchmarks.sources import render
from streamgen.benchmarks.text_benchmark import TextBenchmark
from streamgen.config import BenchmarkConfig, ConfigError
from streamgen.requests.chat import Message
from streamgen.scoring.extract import Extracted, extract_code, fence

IDENTITY = "identity"
"""``Example.payload`` key: the texts of the row's identity fields (what the leakage guard compares)."""


def references(spec: DataSpec, row: Mapping[str, Any]) -> list[str]:
    """Every reference of ``row``: each template rendered; ``{field}`` alone over a list field gives
    each of its items."""
    out: list[str] = []
    for template in spec.references:
        names = placeholders(template)
        value = row[names[0]] if len(names) == 1 and template == "{" + names[0] + "}" else None
        if isinstance(value, list):
            out.extend(str(v) for v in value)
        else:
            out.append(template.format_map(row))
    return out


def _history(cfg: BenchmarkConfig, spec: DataSpec, row: Mapping[str, Any]) -> tuple[Message, ...]:
    if not spec.history_field:
        return ()
    turns = row[spec.history_field]
    if not isinstance(turns, list) or not all(isinstance(t, Mapping) and {"role", "content"} <= set(t)
                                              for t in turns):
        raise ConfigError([f"benchmark {cfg.name} ({yaml_of(cfg)}): options.history_field={spec.history_field!r} "
                           f"must name a list of {{role, content}} turns, got {str(turns)[:80]!r}; fix the field "
                           "or drop the key"])
    return tuple({"role": str(t["role"]), "content": str(t["content"])} for t in turns)


def _identity(spec: DataSpec, cfg: BenchmarkConfig, row: Mapping[str, Any]) -> tuple[str, ...]:
    texts: list[str] = []
    for name in identity_fields(cfg, spec):
        value = row[name]
        texts.extend(str(v) for v in (value if isinstance(value, list) else [value]))
    return tuple(texts)


@dataclass(frozen=True)
class DataTask:
    """Rows → examples, and (for ``code_tests``) answer → test program, as the YAML declares them."""

    spec: DataSpec

    @property
    def scorer_version(self) -> str:
        return self.spec.scorer_part

    def examples(self, cfg: BenchmarkConfig, rows: list[dict[str, Any]], data_dir: Path | None = None) -> list[Example]:
        del data_dir  # a data benchmark reads one file
        if problems := row_problems(cfg, self.spec, rows):
            raise ConfigError(problems, f"benchmark {cfg.name}: its rows lack declared fields")
        return [self.example(cfg, r) for r in rows]

    def example(self, cfg: BenchmarkConfig, row: dict[str, Any]) -> Example:
        s, refs = self.spec, references(self.spec, row)
        if not refs:
            raise ConfigError([f"benchmark {cfg.name} ({yaml_of(cfg)}): row {row[s.id_field]!r} has no reference "
                               "(options.references names an empty list); fix the row or options.references"])
        code = s.scorer == "code_tests"
        payload = {"refs": refs, IDENTITY: _identity(s, cfg, row)}
        if code:
            payload |= {"tests": str(row[s.tests_field or ""]),
                        "entry_point": str(row[s.entry_point_field]) if s.entry_point_field else "",
                        "prefix": str(row[s.prefix_field]) if s.prefix_field else ""}
        return Example(benchmark=cfg.name, example_id=str(row[s.id_field]), history=_history(cfg, s, row),
                       request=render(cfg, row), reference=fence(refs[0]) if code else refs[0],
                       payload=payload, system_prompt=cfg.system_prompt)

    def references(self, example: Example) -> list[str]:
        return list(example.payload["refs"])

    def extract(self, example: Example, answer: str) -> Extracted:
        p = example.payload
        return extract_code(answer, entry_point=p["entry_point"] or None, prefix=p["prefix"])

    def program(self, example: Example, code: str) -> str:
        p = example.payload
        # the prefix (a stub with its imports) goes first unless the answer repeats it; a full
        # function in the answer then redefines the stub
        solution = code if not p["prefix"] or code.startswith(p["prefix"]) else p["prefix"] + "\n" + code
        return self.spec.program_template.format(solution=solution, tests=p["tests"], entry_point=p["entry_point"])


def build(cfg: BenchmarkConfig) -> Benchmark:
    """The benchmark ``cfg`` declares: its options are checked here (one ConfigError), its rows when read."""
    spec = parse_spec(cfg)
    if spec.scorer == "code_tests":
        return CodeBenchmark(cfg, DataTask(spec))
    return TextBenchmark(cfg, DataTask(spec), exact=spec.scorer == "exact")


def identity_texts(example: Example) -> Sequence[str]:
    """The raw field texts a data benchmark recorded for the leakage guard (empty for other benchmarks)."""
    return tuple(example.payload.get(IDENTITY, ()))
