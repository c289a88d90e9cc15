"""Result records, one frozen dataclass per grain, and their Arrow schemas (derived in one place).

Grains (docs/design.md, 'Records'): ``PairRecord`` — one (cell, example); ``StepRecord`` — one segment arrival of
the stream run; ``RunRecord`` — one grid run; ``ScoreRecord`` — one pairs row re-scored later
(``analysis.rescore``); ``ProbeRecord`` — one verdict of the §6.5 probe (``workflows/verifier_probe.py``). Column names users' queries rely on are a public contract (docs/design.md, 'Records') (users' DuckDB
queries and the nightly grid rely on them): add columns freely, never rename.

Units are in the names: ``*_s`` seconds, ``*_forwards`` model calls, ``*_tokens`` tokens,
``*_quality`` a fraction in [0, 1] (pass@1 for code benchmarks, token-level F1 for text).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
import typing
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 3
"""Bump when a change alters what a result row means; shard ids include it, so old shards rerun."""


@dataclass(frozen=True)
class ReportColumn:
    """A pairs field the report shows per cell, declared beside the field as its metadata::

        residual_tokens_fed: int | None = field(default=None, metadata=reported(
            "quantile_cont({col}, 0.5)", "median_residual_tokens_fed", "Tokens fed after final", "num"))

    The analysis then carries it everywhere a Table 1 column goes (``analysis.sql_template``):
    ``pair_rows`` gets the field (NULL unless the row is included), ``cells.sql`` its ``aggregate``
    per cell and pooled row as ``name``, ``models.sql`` the mean of the benchmarks' values for the
    macro row, and the report's Table 1 a column ``label`` formatted as ``kind`` (analysis.render)."""

    aggregate: str  # DuckDB aggregate over ``{col}``, the field on the included rows
    name: str  # the cells / models column it becomes
    label: str  # the report's column heading
    kind: str = "num"  # analysis.render's format: num, pct, x, share


def reported(aggregate: str, name: str, label: str, kind: str = "num") -> dict[str, ReportColumn]:
    """Field metadata declaring a reported per-pair column (``ReportColumn``)."""
    return {"report": ReportColumn(aggregate, name, label, kind)}


def report_columns(record_type: type) -> tuple[tuple[str, ReportColumn], ...]:
    """(field name, declaration) of every field of ``record_type`` declared with ``reported``, in field order."""
    return tuple((f.name, f.metadata["report"]) for f in dataclasses.fields(record_type) if "report" in f.metadata)


@dataclass(frozen=True)
class PairRecord:
    """One example of one cell: the base run and the stream run, side by side."""

    run_id: str
    shard_id: str
    cell_id: str
    model: str
    family: str  # 'autoregressive' | 'refusion' | 'bidirectional' | 'diffusion_gemma'
    benchmark: str
    benchmark_version: str
    acceptance: str  # 'greedy' | 'threshold'
    tau: float | None  # null for greedy
    example_id: str
    n_segments: int
    excluded_reason: str | None  # null when included
    error_type: str | None  # null when none
    error_traceback: str | None
    base_forwards: int | None
    residual_forwards: int | None
    speculative_forwards: int | None
    base_wall_s: float | None
    residual_wall_s: float | None
    speculative_wall_s: float | None
    base_forward_wall_s: float | None  # wall time spent inside model forwards, base run
    residual_forward_wall_s: float | None
    base_tokens_fed: int | None
    residual_tokens_fed: int | None
    min_residual_forwards: int | None  # the family's floor: 1 autoregressive, 3 ReFusion
    draft_tokens_final: int | None  # draft length entering the final verify
    accepted_tokens_final: int | None  # accepted leading run at the final verify
    base_answer_tokens: int | None
    stream_answer_tokens: int | None
    base_answer: str | None
    stream_answer: str | None
    base_quality: float | None
    stream_quality: float | None
    base_score_status: str | None  # passed / failed / timeout / error / f1
    stream_score_status: str | None
    run_order: str | None  # 'base_first' | 'stream_first'
    variant: str | None  # adaptation variant (e.g. 'lora-1000'); null for the plain model
    verifier_mode: str | None  # bidirectional ablation: 'visible' | 'hidden'; null otherwise
    device: str
    actor_id: str | None
    sandbox_backend: str | None
    schema_version: int
    code_version: str
    # ReFusion's effective thresholds in this cell (model YAML + decoding.per_benchmark); null otherwise
    slot_threshold: float | None = None
    token_threshold: float | None = None
    cell_fingerprint: str | None = None  # hash of every result-defining setting (streamgen.results.cells); null before v2
    cell_settings: str | None = None  # those settings as flat JSON, so the analysis can say what differs
    sandbox_view: str | None = None  # what scored programs could see ('allowlist-1', 'host'); null unscored
    live_policy: str | None = None  # live cells: the drafting policy on the real clock (docs/timing.md)
    live_chars_per_s: float | None = None  # live cells: the typing rate
    scorer_version: str | None = None  # the benchmark scorer's version that gave the qualities; null unscored
    # what the qualities measure: the benchmark's metric (pass@1, f1, exact; an lm-eval task's "<metric>,<filter>")
    quality_metric: str | None = None
    # Numerics and divergence (issue 27, docs/numerics.md). Margins are top-1 minus top-2 logit in units
    # of the logits dtype's spacing at the top-1 logit; null for families that report none.
    tie_guard: float | None = None  # greedy's tie guard in dtype spacings; null: none
    numerics: str | None = None  # JSON: the actor's streamgen.decoding.numerics.NumericsRecord
    first_diff_token: int | None = None  # first answer position where stream and base tokens differ; null: equal
    base_margin_at_diff: float | None = None  # the base run's margin there (its decode / prefill row)
    stream_margin_at_diff: float | None = None  # the final step's margin there (verify row or regeneration)
    diff_from_draft: bool | None = None  # the stream's token there was an accepted draft token
    draft_tokens_after_diff: int | None = None  # final stream tokens after that position taken from the draft
    # Stale drafts (issue 39, paper §6.5's "nine-token stub, never revised"): the stream answer's tokens
    # equal the first stream step's draft (the answer written from the opening segment); null on error rows
    stream_is_first_draft: bool | None = None


@dataclass(frozen=True)
class StepRecord:
    """One segment arrival in the stream run: verify the previous draft, accept, regenerate."""

    run_id: str
    shard_id: str
    cell_id: str
    model: str
    benchmark: str
    acceptance: str
    tau: float | None
    example_id: str
    step: int  # 1-based segment index
    is_final: bool
    prefix_chars: int
    draft_tokens_in: int
    accepted_tokens: int
    generated_tokens: int
    forwards: int
    tokens_fed: int
    wall_s: float
    forward_wall_s: float
    verifier_mode: str | None
    schema_version: int
    code_version: str
    verify_median_prob: float | None = None  # median verifier probability of the incoming draft; null without
    cell_fingerprint: str | None = None  # as on the pairs row
    draft_fingerprint: str | None = None  # hash of the draft token ids this step produced (its answer)
    pasted_chars: int | None = None  # of prefix_chars, characters inside code blocks (pasted when typing)
    sentence_ends: int | None = None  # sentence boundaries strictly inside the prefix (typing pauses)
    arrival_s: float | None = None  # live cells: segment arrival after the first keystroke
    start_s: float | None = None  # live cells: when the step started, same origin
    arrived_text: str | None = None  # request text that arrived since the previous step row (the viewer)
    draft_kept_text: str | None = None  # the incoming draft's accepted leading run, decoded
    draft_thrown_text: str | None = None  # the rest of the incoming draft (to draft_tokens_in), thrown away
    request_tokens: int | None = None  # tokens of the step's rendered request (null where a family does not say)
    cached_tokens: int | None = None  # of those, reused from the state the step started from (not fed)
    live_every_k: int | None = None  # live every_k cells: the k
    # corrections cells (streamgen.timing.corrections; null elsewhere): how this step's request text differs
    # from the previous step row's — the first changed character, characters deleted from there and
    # inserted in their place (a plain extension deletes 0) — and the keystrokes spent on corrections since
    first_change_char: int | None = None
    chars_deleted: int | None = None
    chars_inserted: int | None = None
    correction_keys: int | None = None


@dataclass(frozen=True)
class RunRecord:
    """One grid run: what was asked for, on what, when."""

    run_id: str
    grid: str
    config_yaml: str  # the resolved config, as YAML
    code_version: str
    host: str
    device_inventory: str  # JSON: Ray nodes and their devices; actors (device), actor_placements (GPU ids, CPU fallback)
    started_at: str  # ISO 8601, UTC
    finished_at: str | None
    shards_total: int
    shards_done: int
    shards_skipped: int  # found complete on disk (resume)
    schema_version: int
    forwards_executed: int | None = None  # model calls the actors actually executed (shared runs once)
    status: str | None = None  # running / finished / interrupted / aborted / failed (None: before status existed)
    stop_signal: str | None = None  # SIGTERM / SIGINT when status is interrupted
    numerics: str | None = None  # JSON: actor id → its streamgen.decoding.numerics.NumericsRecord (docs/numerics.md)
    model_snapshots: str | None = None  # JSON: model → the hub snapshot commit it loaded (null: not a hub model)
    examples_resumed: int | None = None  # pair rows taken from killed units' spools instead of decoded (jobs.run.spool)


@dataclass(frozen=True)
class ScoreRecord:
    """One pairs row re-scored by ``python -m analysis.rescore``: both answers' verdicts under the
    scorer version it names. Keyed by the pairs row it re-scores (run_id, shard_id, example_id); the
    analysis uses the newest (``rescore_id`` sorts by time) in place of the row's own scores."""

    rescore_id: str  # one rescore invocation: UTC start time + random hex
    run_id: str
    shard_id: str
    example_id: str
    cell_fingerprint: str | None
    model: str
    benchmark: str
    scorer_version: str
    base_quality: float | None
    stream_quality: float | None
    base_score_status: str | None
    stream_score_status: str | None
    sandbox_backend: str | None
    sandbox_view: str | None
    code_version: str
    schema_version: int


@dataclass(frozen=True)
class ProbeRecord:
    """Paper §6.5: one verifier's verdict on one draft offered under the complete request, under one
    acceptance rule (``streamgen.diagnostics.probe_drafts``). One verify forward serves every rule of a (draft, verifier)."""

    probe_id: str  # one probe invocation: UTC start time + random hex
    model: str
    family: str
    benchmark: str
    example_id: str
    draft_kind: str  # 'own' (the model's base answer) | 'unrelated' (another example's) | 'random'
    verifier: str  # 'causal' (autoregressive, ReFusion) | 'visible' | 'hidden' (LLaDA/Dream, DiffusionGemma)
    acceptance: str  # 'greedy' | 'threshold'
    tau: float | None
    draft_tokens: int  # positions the verify pass scored (cut after the first EOS)
    accepted_tokens: int  # the accepted leading run
    median_prob: float | None  # median over the draft of the verifier's probability of its token
    base_source: str  # where the own answers came from: 'decoded' here | 'reused' from a results dir
    max_new_tokens: int
    seed: int  # of the random drafts
    code_version: str
    schema_version: int


_SCALARS: dict[type, pa.DataType] = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def _arrow_type(hint: Any) -> tuple[pa.DataType, bool]:
    """Map a field's type hint to (arrow type, nullable)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        assert len(args) == 1, f"unsupported union {hint!r}"
        return _SCALARS[args[0]], True
    return _SCALARS[hint], False


@functools.cache
def arrow_schema(record_type: type) -> pa.Schema:
    """The Arrow schema of a record dataclass: one field per dataclass field, in order."""
    hints = typing.get_type_hints(record_type)
    fields = []
    for f in dataclasses.fields(record_type):
        dtype, nullable = _arrow_type(hints[f.name])
        fields.append(pa.field(f.name, dtype, nullable=nullable))
    return pa.schema(fields, metadata={"schema_version": str(SCHEMA_VERSION), "record": record_type.__name__})


PAIRS_SCHEMA = arrow_schema(PairRecord)
STEPS_SCHEMA = arrow_schema(StepRecord)
RUNS_SCHEMA = arrow_schema(RunRecord)
SCORES_SCHEMA = arrow_schema(ScoreRecord)
PROBE_SCHEMA = arrow_schema(ProbeRecord)


def to_table(records: Sequence[Any], record_type: type) -> pa.Table:
    """Records → Arrow table with the record type's schema (an empty list gives an empty table)."""
    schema = arrow_schema(record_type)
    columns = {name: [getattr(r, name) for r in records] for name in schema.names}
    return pa.table(columns, schema=schema)


def from_table(table: pa.Table, record_type: type) -> list[Any]:
    """Arrow table → records (for tests and the nightly comparison)."""
    names = [f.name for f in dataclasses.fields(record_type)]
    return [record_type(**{n: row[n] for n in names}) for row in table.select(names).to_pylist()]


def write_parquet_atomic(table: pa.Table, path: str | os.PathLike[str]) -> Path:
    """Write ``table`` to ``path`` so that a reader sees either nothing or the whole file.

    Writes to a temporary name in the same directory, fsyncs, then renames (atomic on POSIX).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read_parquet_validated(path: str | os.PathLike[str], record_type: type) -> pa.Table:
    """Read a result file and check it has the record type's columns; raises on any damage.

    A truncated or corrupted file raises (pyarrow cannot read its footer); a file of another schema
    raises ``ValueError`` naming the missing columns.
    """
    table = pq.read_table(path)
    expected = arrow_schema(record_type)
    missing = [n for n in expected.names if n not in table.schema.names]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}; delete it to recompute the shard")
    return table


def read_columns_validated(path: str | os.PathLike[str], record_type: type, columns: Sequence[str]) -> pa.Table:
    """Like :func:`read_parquet_validated`, reading only the footer and ``columns`` (resume's check: the
    rows' ids, not the answers). A truncated or corrupted footer raises as there."""
    names = pq.read_schema(path).names
    missing = [n for n in arrow_schema(record_type).names if n not in names]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}; delete it to recompute the shard")
    return pq.read_table(path, columns=list(columns))


def concat_records(batches: Iterable[Sequence[Any]]) -> list[Any]:
    out: list[Any] = []
    for b in batches:
        out.extend(b)
    return out
