"""Hypothesis strategies for valid record sets, and writing them as a results directory.

Values come from small sets so that ties are common (equal speedups, equal medians). Excluded and
error rows carry extreme values (huge forwards, quality 1.0) so that one leaking into a statistic
changes it visibly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import strategies as st

from streamgen.results.records import (
    SCHEMA_VERSION,
    PairRecord,
    RunRecord,
    StepRecord,
    read_parquet_validated,
    to_table,
)

MODEL_FAMILIES = {"m-ar": ("autoregressive", 1), "m-rf": ("refusion", 3)}
BENCHMARKS = ("humaneval", "mbpp", "chat")
SETTINGS = (("greedy", None), ("threshold", 0.5), ("threshold", 0.9))
VARIANTS = (None, "lora")
MODES = (None, "hidden")


@dataclass(frozen=True)
class RecordSet:
    pairs: list[PairRecord]
    steps: list[StepRecord]


def pair_record(**fields: object) -> PairRecord:
    """A valid included PairRecord; ``fields`` override any column."""
    base = dict(
        run_id="run-1",
        shard_id="shard-1",
        cell_id="cell",
        model="m-ar",
        family="autoregressive",
        benchmark="humaneval",
        benchmark_version="1",
        acceptance="greedy",
        tau=None,
        example_id="e0",
        n_segments=3,
        excluded_reason=None,
        error_type=None,
        error_traceback=None,
        base_forwards=10,
        residual_forwards=2,
        speculative_forwards=12,
        base_wall_s=1.0,
        residual_wall_s=0.25,
        speculative_wall_s=1.2,
        base_forward_wall_s=0.9,
        residual_forward_wall_s=0.2,
        base_tokens_fed=40,
        residual_tokens_fed=20,
        min_residual_forwards=1,
        draft_tokens_final=8,
        accepted_tokens_final=8,
        base_answer_tokens=9,
        stream_answer_tokens=9,
        base_answer="a",
        stream_answer="a",
        base_quality=1.0,
        stream_quality=1.0,
        base_score_status="passed",
        stream_score_status="passed",
        run_order="base_first",
        variant=None,
        verifier_mode=None,
        device="cpu",
        actor_id=None,
        sandbox_backend=None,
        schema_version=SCHEMA_VERSION,
        code_version="test",
    )
    base.update(fields)
    return PairRecord(**base)  # type: ignore[arg-type]


@st.composite
def _row(
    draw: st.DrawFn, models: list[str], benchmarks: list[str], settings: list, variants: list, modes: list
) -> dict:
    model = draw(st.sampled_from(models))
    acceptance, tau = draw(st.sampled_from(settings))
    kind = draw(st.sampled_from(["ok", "ok", "ok", "ok", "excluded", "error", "both"]))
    draft = draw(st.sampled_from([0, 1, 4, 8]))
    return dict(
        model=model,
        family=MODEL_FAMILIES[model][0],
        benchmark=draw(st.sampled_from(benchmarks)),
        acceptance=acceptance,
        tau=tau,
        variant=draw(st.sampled_from(variants)),
        verifier_mode=draw(st.sampled_from(modes)),
        excluded_reason="single_segment" if kind in ("excluded", "both") else None,
        error_type="RuntimeError" if kind in ("error", "both") else None,
        base_forwards=draw(st.sampled_from([1, 2, 4, 8, 12])),
        residual_forwards=draw(st.sampled_from([1, 2, 3, 4, 8, 13])),
        speculative_forwards=draw(st.sampled_from([0, 3, 7])),
        base_wall_s=draw(st.sampled_from([0.5, 1.0, 2.0])),
        residual_wall_s=draw(st.sampled_from([0.25, 0.5, 1.0, 2.5])),
        min_residual_forwards=MODEL_FAMILIES[model][1],
        draft_tokens_final=draft,
        accepted_tokens_final=draw(st.sampled_from(sorted({0, draft // 2, draft}))),
        base_quality=draw(st.sampled_from([0.0, 0.5, 1.0])),
        stream_quality=draw(st.sampled_from([0.0, 0.25, 1.0])),
        n_segments=draw(st.integers(2, 4)),
        stream_is_first_draft=draw(st.booleans()),
    )


_POISON = dict(
    base_forwards=10**6,
    residual_forwards=1,
    base_wall_s=1e6,
    residual_wall_s=1e-3,
    base_quality=1.0,
    stream_quality=1.0,
    speculative_forwards=10**6,
)


@st.composite
def record_sets(draw: st.DrawFn, max_rows: int = 40) -> RecordSet:
    """A valid set of pairs rows (+ their steps): 1–2 models, 1–3 benchmarks, mixed settings."""
    models = draw(st.lists(st.sampled_from(sorted(MODEL_FAMILIES)), min_size=1, max_size=2, unique=True))
    benchmarks = draw(st.lists(st.sampled_from(BENCHMARKS), min_size=1, max_size=3, unique=True))
    settings = draw(st.lists(st.sampled_from(SETTINGS), min_size=1, max_size=3, unique=True))
    variants = draw(st.lists(st.sampled_from(VARIANTS), min_size=1, max_size=2, unique=True))
    modes = draw(st.lists(st.sampled_from(MODES), min_size=1, max_size=2, unique=True))
    rows = draw(st.lists(_row(models, benchmarks, settings, variants, modes), min_size=1, max_size=max_rows))
    pairs = []
    for i, row in enumerate(rows):
        if row["excluded_reason"] or row["error_type"]:
            row = {**row, **_POISON}
        cell = f"{row['model']}|{row['benchmark']}|{row['tau']}|{row['variant']}|{row['verifier_mode']}"
        pairs.append(pair_record(**row, cell_id=cell, example_id=f"e{i}"))
    rng = random.Random(draw(st.integers(0, 2**16)))
    steps = [s for p in pairs for s in steps_for(p, rng)]
    return RecordSet(pairs, steps)


def steps_for(pair: PairRecord, rng: random.Random) -> list[StepRecord]:
    """Steps of one pair; the final step usually (not always) carries the residual forwards."""
    out = []
    for step in range(1, pair.n_segments + 1):
        final = step == pair.n_segments
        forwards = pair.residual_forwards if final and rng.random() < 0.8 else rng.randint(1, 6)
        draft_in = 0 if step == 1 else rng.choice([0, 3, 5])
        out.append(
            StepRecord(
                run_id=pair.run_id,
                shard_id=pair.shard_id,
                cell_id=pair.cell_id,
                model=pair.model,
                benchmark=pair.benchmark,
                acceptance=pair.acceptance,
                tau=pair.tau,
                example_id=pair.example_id,
                step=step,
                is_final=final,
                prefix_chars=10 * step,
                draft_tokens_in=draft_in,
                accepted_tokens=rng.randint(0, draft_in),
                generated_tokens=3,
                forwards=forwards,
                tokens_fed=forwards + draft_in,
                wall_s=0.1,
                forward_wall_s=0.09,
                verifier_mode=pair.verifier_mode,
                schema_version=SCHEMA_VERSION,
                code_version="test",
            )
        )
    return out


def run_record(run_id: str = "run-1") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        grid="test",
        config_yaml="{}",
        code_version="test",
        host="h",
        device_inventory="[]",
        started_at="2026-11-30T00:00:00+00:00",
        finished_at=None,
        shards_total=1,
        shards_done=1,
        shards_skipped=0,
        schema_version=SCHEMA_VERSION,
    )


def write_record_set(
    results_dir: Path, records: RecordSet, *, with_steps: bool = True, with_runs: bool = True
) -> Path:
    """Write pairs split across two files per model (so globbing over many files is exercised).

    Plain ``pq.write_table`` of ``records.to_table`` output: the atomic writer's fsync would make
    hypothesis runs slow, and atomicity is not under test here.
    """
    by_file: dict[str, list[PairRecord]] = {}
    for i, p in enumerate(records.pairs):
        by_file.setdefault(f"{p.model}/part-{i % 2}", []).append(p)
    for name, rows in sorted(by_file.items()):
        _write(to_table(rows, PairRecord), results_dir / "pairs" / f"{name}.parquet")
    if with_steps and records.steps:
        _write(to_table(records.steps, StepRecord), results_dir / "steps" / "all.parquet")
    if with_runs:
        _write(to_table([run_record()], RunRecord), results_dir / "runs" / "run-1.parquet")
    return results_dir


def _write(table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def read_pairs(results_dir: Path) -> list[dict]:
    """Every pairs row under ``results_dir/pairs`` as dicts, each file checked against the record."""
    files = sorted(Path(results_dir).glob("pairs/**/*.parquet"))
    return [row for f in files for row in read_parquet_validated(f, PairRecord).to_pylist()]


# What two runs of one grid must agree on, example by example, wherever they ran (a cluster against a local run):
# the counts, the lengths and both answers, never a time or where it ran.
COMPARED = ("base_forwards", "residual_forwards", "speculative_forwards", "draft_tokens_final",
            "accepted_tokens_final", "base_answer", "stream_answer", "excluded_reason", "error_type")


def rows_by_example(results_dir: Path) -> dict[tuple[str, str], dict]:
    """``(cell_id, example_id)`` → that pairs row's :data:`COMPARED` columns; an example written twice fails."""
    rows = read_pairs(results_dir)
    keyed = {(r["cell_id"], r["example_id"]): {f: r[f] for f in COMPARED} for r in rows}
    assert len(keyed) == len(rows), "an example appears twice"
    return keyed
