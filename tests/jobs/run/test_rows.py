"""The one row builder (jobs/run/rows.py): identity columns from the cell, nulls derived from the
records, one spelling of the cell label from the grid to the nightly comparison."""

from __future__ import annotations

import dataclasses

import pytest

from analysis.regression import cell_key
from jobs.run.rows import RowContext, error_rows, excluded_rows
from streamgen.acceptance_rules import Threshold, column_label, make_rule
from streamgen.config import TypingConfig, benchmark_config, model_config
from streamgen.results.cells import Cell, cell_label, settings_json
from streamgen.results.records import SCHEMA_VERSION, PairRecord, StepRecord

OWN = {"example_id", "n_segments", "excluded_reason", "error_type", "error_traceback"}


def _ctx(**cell: object) -> RowContext:
    base = dict(rule=Threshold(0.5), verifier_mode="visible", max_new_tokens=16, limit=3)
    c = Cell(model_config("tiny-llada"), benchmark_config("coedit"), **{**base, **cell})  # type: ignore[arg-type]
    return RowContext(c, "run-1", "shard-1", "v-test", "cpu", "host:1", (0.9, 0.4))


def test_identity_columns_come_from_the_cell() -> None:
    ctx = _ctx(live=TypingConfig(chars_per_s=[12.0], live_policy="latest"))
    pair = excluded_rows(ctx, "e1", 1, "single_segment").pair
    cell = ctx.cell
    assert (pair.model, pair.family, pair.benchmark, pair.acceptance, pair.tau, pair.verifier_mode) == (
        "tiny-llada", "bidirectional", "coedit", "threshold", 0.5, "visible")
    assert pair.cell_id == cell.cell_id and pair.cell_fingerprint == cell.fingerprint
    assert pair.cell_settings == settings_json(cell.settings()) and pair.benchmark_version == cell.benchmark.version
    assert (pair.live_policy, pair.live_chars_per_s) == ("latest", 12.0)
    assert (pair.slot_threshold, pair.token_threshold, pair.device, pair.actor_id) == (0.9, 0.4, "cpu", "host:1")
    assert (pair.run_id, pair.shard_id, pair.code_version, pair.schema_version) == (
        "run-1", "shard-1", "v-test", SCHEMA_VERSION)
    # every identity column the context names is a column of the pair or the step record
    names = {f.name for f in dataclasses.fields(PairRecord)} | {f.name for f in dataclasses.fields(StepRecord)}
    assert set(ctx.columns()) <= names


def test_error_and_excluded_rows_null_every_other_column() -> None:
    """The null columns are what the record has beyond identity and the example's own: derived here from
    the dataclass, as the builder derives them, so a new column is null there without a hand list."""
    ctx = _ctx()
    outcome_columns = {f.name for f in dataclasses.fields(PairRecord)} - set(ctx.columns()) - OWN
    assert {"base_forwards", "residual_wall_s", "stream_answer", "sandbox_view"} <= outcome_columns
    excluded = excluded_rows(ctx, "e1", 1, "single_segment")
    error = error_rows(ctx, "e2", 3, RuntimeError("verifier crashed"))
    assert excluded.steps == [] and error.steps == []
    for row in (excluded.pair, error.pair):
        assert {c: getattr(row, c) for c in outcome_columns} == dict.fromkeys(outcome_columns)
    assert excluded.pair.excluded_reason == "single_segment" and excluded.pair.error_type is None
    assert error.pair.error_type == "RuntimeError" and "verifier crashed" in (error.pair.error_traceback or "")
    assert error.pair.excluded_reason is None and error.pair.n_segments == 3


@pytest.mark.parametrize("acceptance,tau,mode,label", [
    ("greedy", None, None, "tiny-llada / coedit / greedy"),
    ("threshold", 0.5, "visible", "tiny-llada / coedit / threshold τ=0.5 [visible]"),
])
def test_the_cell_label_is_spelled_one_way(acceptance: str, tau: float | None, mode: str | None,
                                          label: str) -> None:
    ctx = _ctx(rule=make_rule(acceptance, {"tau": tau}), verifier_mode=mode)
    row = dataclasses.asdict(excluded_rows(ctx, "e1", 1, "single_segment").pair)
    assert ctx.cell.label == label == cell_key(row)  # the grid's name and the nightly gate's key
    assert cell_label("tiny-llada", "coedit", column_label(acceptance, tau), mode) == label
