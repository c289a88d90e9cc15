"""What a data-only benchmark's YAML declares (``module: data``), read and checked before anything runs.

A benchmark defined by data alone names, under ``options:``, which fields of its JSONL rows are the
example id, the references and (for ``scorer: code_tests``) the tests; the request is the YAML's
``prompt_template`` over the row's fields (:func:`streamgen.benchmarks.sources.render`). The keys
live under ``options`` because every top-level benchmark field enters every benchmark's shard ids:
a new one would move the ids of all of them (``streamgen.results.cells.Cell.identity``).

:func:`parse_spec` turns the options into a :class:`DataSpec` and :func:`row_problems` checks the
rows against it; each raises one :class:`~streamgen.config.ConfigError` listing every problem, each
naming the YAML, the key and the fix. The key table is in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import string
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from streamgen.config import BenchmarkConfig, ConfigError

SCORERS = {"exact": ("exact", "text"), "f1": ("f1", "text"), "code_tests": ("pass@1", "code")}
"""scorer → (the ``metric`` and ``answer_extraction`` the YAML must declare with it)."""
SEGMENTATIONS = ("sentence",)
PROGRAM_FIELDS = ("solution", "tests", "entry_point")
DEFAULT_PROGRAM = "{solution}\n\n{tests}\n"
RUNNER_KEYS = ("python", "memory_gb", "sandbox_backend", "known_failures", "load_sensitive")
"""Options the sandbox runner and ``python -m streamgen.benchmarks check`` read, as for every code benchmark."""
SPEC_KEYS = ("id_field", "references", "scorer", "history_field", "tests_field", "entry_point_field",
             "prefix_field", "program_template", "segmentation", "identity_fields")


@dataclass(frozen=True)
class DataSpec:
    """The declarations of a ``module: data`` benchmark (see ``docs/benchmarks.md`` for each key)."""

    id_field: str
    references: tuple[str, ...]  # templates over the row; "{f}" alone over a list field: each item
    scorer: str  # exact | f1 | code_tests
    history_field: str | None = None  # a list of {role, content} turns before the streamed request
    tests_field: str | None = None  # code_tests: the test code
    entry_point_field: str | None = None  # code_tests: the function the tests call
    prefix_field: str | None = None  # code_tests: code the answer completes (prepended unless repeated)
    program_template: str = DEFAULT_PROGRAM  # code_tests: over {solution}, {tests}, {entry_point}
    segmentation: str = "sentence"
    identity_fields: tuple[str, ...] = ()  # leakage guard: row fields that identify an evaluation row

    @property
    def scorer_part(self) -> str:
        """8 hex of the scoring declarations: a change to any of them is a new scorer version."""
        scoring = {k: v for k, v in asdict(self).items() if k not in ("history_field", "segmentation",
                                                                      "identity_fields", "id_field")}
        return hashlib.sha256(json.dumps(scoring, sort_keys=True).encode()).hexdigest()[:8]


def yaml_of(cfg: BenchmarkConfig) -> str:
    """Where the user fixes a benchmark: its YAML under ``configs/benchmarks/``."""
    return f"configs/benchmarks/{cfg.name}.yaml"


def placeholders(template: str) -> list[str]:
    """The row fields a ``str.format`` template reads (``{a[0]}`` and ``{a.b}`` read ``a``)."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ConfigError([f"template {template!r} is not a str.format template ({exc}); write literal "
                           "braces as {{ and }}"]) from exc
    return [n.split(".")[0].split("[")[0] for n in names]


def _text(options: Mapping[str, Any], key: str, where: str, problems: list[str]) -> str | None:
    value = options.get(key)
    if value is None or (isinstance(value, str) and value):
        return value
    problems.append(f"{where}: options.{key}={value!r} must be a field name (a non-empty string)")
    return None


def _texts(options: Mapping[str, Any], key: str, where: str, problems: list[str]) -> tuple[str, ...]:
    value = options.get(key)
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Sequence) or not items or not all(isinstance(v, str) and v for v in items):
        problems.append(f"{where}: options.{key}={value!r} must be a string or a non-empty list of strings")
        return ()
    return tuple(items)


def _unknown_keys(options: Mapping[str, Any], where: str) -> list[str]:
    known = (*SPEC_KEYS, *RUNNER_KEYS)
    out = []
    for key in options:
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean options.{near[0]}? " if near else ""
            out.append(f"{where}: options.{key} is not a key of a data benchmark; {hint}the keys are "
                       f"{', '.join(known)}")
    return out


def _scorer_problems(cfg: BenchmarkConfig, spec: DataSpec, where: str) -> list[str]:
    if spec.scorer not in SCORERS:
        return [f"{where}: options.scorer={spec.scorer!r} is not a scorer; use one of {', '.join(SCORERS)}"]
    metric, extraction = SCORERS[spec.scorer]
    p = []
    if cfg.metric != metric or cfg.answer_extraction != extraction:
        p.append(f"{where}: options.scorer={spec.scorer} needs metric: {metric} and answer_extraction: "
                 f"{extraction} (the YAML says {cfg.metric} and {cfg.answer_extraction}); set them")
    code_keys = ("tests_field", "entry_point_field", "prefix_field")
    if spec.scorer == "code_tests":
        if not spec.tests_field:
            p.append(f"{where}: options.scorer=code_tests needs options.tests_field (the field holding the tests)")
        if len(spec.references) != 1:
            p.append(f"{where}: options.scorer=code_tests takes one reference program; options.references "
                     f"lists {len(spec.references)}")
        bad = [f for f in placeholders(spec.program_template) if f not in PROGRAM_FIELDS]
        if bad:
            p.append(f"{where}: options.program_template reads {bad}; it may use only "
                     f"{', '.join('{' + f + '}' for f in PROGRAM_FIELDS)}")
    elif used := [k for k in code_keys if getattr(spec, k)] + (
            ["program_template"] if spec.program_template != DEFAULT_PROGRAM else []):
        p.append(f"{where}: options.{', options.'.join(used)} apply to scorer code_tests only; remove them "
                 f"or set options.scorer=code_tests")
    return p


def parse_spec(cfg: BenchmarkConfig) -> DataSpec:
    """The :class:`DataSpec` of a ``module: data`` benchmark; one ConfigError listing every problem."""
    where = f"benchmark {cfg.name} ({yaml_of(cfg)})"
    options, p = cfg.options, _unknown_keys(cfg.options, where)
    for key in ("id_field", "scorer", "references"):
        if not options.get(key):
            p.append(f"{where}: options.{key} is required (docs/benchmarks.md, 'A benchmark from data alone')")
    text = {k: _text(options, k, where, p) for k in ("id_field", "scorer", "history_field", "tests_field",
                                                     "entry_point_field", "prefix_field")}
    segmentation = options.get("segmentation", "sentence")
    if segmentation not in SEGMENTATIONS:
        p.append(f"{where}: options.segmentation={segmentation!r} is not one of {SEGMENTATIONS}; other arrival "
                 "units are the grid's granularity=word|chars, which re-cuts every benchmark alike")
    spec = DataSpec(
        id_field=text["id_field"] or "", references=_texts(options, "references", where, p),
        scorer=text["scorer"] or "", history_field=text["history_field"], tests_field=text["tests_field"],
        entry_point_field=text["entry_point_field"], prefix_field=text["prefix_field"],
        program_template=str(options.get("program_template", DEFAULT_PROGRAM)), segmentation=str(segmentation),
        identity_fields=_texts(options, "identity_fields", where, p))
    if text["scorer"]:
        try:
            p.extend(_scorer_problems(cfg, spec, where))
        except ConfigError as exc:
            p.extend(f"{where}: options.program_template: {e}" for e in exc.problems)
    p.extend(_template_problems(cfg, spec, where))
    if p:
        raise ConfigError(p, f"benchmark {cfg.name}: invalid data benchmark")
    return spec


def _template_problems(cfg: BenchmarkConfig, spec: DataSpec, where: str) -> list[str]:
    out: list[str] = []
    for key, templates in (("prompt_template", [cfg.prompt_template]), ("options.references", spec.references)):
        for t in templates:
            try:
                placeholders(t)
            except ConfigError as exc:
                out.extend(f"{where}: {key}: {e}" for e in exc.problems)
    return out


def declared_fields(cfg: BenchmarkConfig, spec: DataSpec) -> dict[str, list[str]]:
    """Every row field the YAML names, by the key that names it (what every row must have)."""
    named = {"options.id_field": [spec.id_field], "prompt_template": placeholders(cfg.prompt_template),
             "options.references": [f for t in spec.references for f in placeholders(t)],
             "options.identity_fields": list(spec.identity_fields)}
    for key in ("history_field", "tests_field", "entry_point_field", "prefix_field"):
        if value := getattr(spec, key):
            named[f"options.{key}"] = [value]
    return named


def identity_fields(cfg: BenchmarkConfig, spec: DataSpec) -> tuple[str, ...]:
    """The row fields the leakage guard compares: the declared ones, else the request's and the
    references' placeholders."""
    if spec.identity_fields:
        return spec.identity_fields
    named = declared_fields(cfg, spec)
    return tuple(dict.fromkeys([*named["prompt_template"], *named["options.references"]]))


def row_problems(cfg: BenchmarkConfig, spec: DataSpec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One problem per declared field that some row lacks, naming the first such row and the fix."""
    where = f"benchmark {cfg.name} ({yaml_of(cfg)})"
    if not rows:
        return [f"{where}: its data file {cfg.data_file} has no rows"]
    out = []
    for key, names in declared_fields(cfg, spec).items():
        for name in dict.fromkeys(names):
            n = next((i for i, r in enumerate(rows) if name not in r), None)
            if n is not None:
                out.append(f"{where}: {key} names the field {name!r}, which row {n + 1} of {cfg.data_file} "
                           f"lacks (its fields: {', '.join(sorted(rows[n]))}); fix {key}")
    return out
