"""Realistic synthetic result directories, generated column-wise with numpy (fast at 10^6 rows).

Used by the report tests (a few hundred rows) and by ``bench/bench_analysis.py`` (10^6 pairs,
10^7 steps). The numbers imitate the paper's shape, not its values: the outcome at the final update
is close to binary (keep the whole draft → residual at the family's floor; keep nothing → one
wasted verify over the base cost), lower τ accepts more and costs some quality, and a few percent
of requests are excluded (single segment, empty answer) or errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamgen.results.records import (
    PAIRS_SCHEMA,
    RUNS_SCHEMA,
    SCHEMA_VERSION,
    STEPS_SCHEMA,
    write_parquet_atomic,
)

# benchmark → (P(keep all) under greedy, P(part), quality metric is pass@1?, mean answer tokens)
BENCHMARKS: dict[str, tuple[float, float, bool, float]] = {
    "humaneval": (0.80, 0.08, True, 60.0),
    "mbpp": (0.75, 0.05, True, 50.0),
    "canitedit": (0.30, 0.30, True, 120.0),
    "ds1000": (0.25, 0.10, True, 70.0),
    "coedit": (0.35, 0.15, False, 30.0),
    "chat": (0.10, 0.08, False, 180.0),
}
MODELS: dict[str, tuple[str, int]] = {"smollm2-360m": ("autoregressive", 1), "refusion-8b": ("refusion", 3)}
SETTINGS: tuple[tuple[str, float | None], ...] = (("greedy", None), ("threshold", 0.5), ("threshold", 0.9))


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate: the grid's axes, examples per cell, segments per request."""

    models: tuple[str, ...] = tuple(MODELS)
    benchmarks: tuple[str, ...] = tuple(BENCHMARKS)
    settings: tuple[tuple[str, float | None], ...] = SETTINGS
    variants: tuple[str | None, ...] = (None,)
    examples_per_cell: int = 40
    mean_segments: float = 4.0
    seed: int = 0
    files_per_cell: int = 1
    run_id: str = "synthetic-run"


def _cells(spec: SyntheticSpec) -> list[tuple[str, str, str, float | None, str | None]]:
    return [
        (m, b, acc, tau, v)
        for m in spec.models
        for b in spec.benchmarks
        for acc, tau in spec.settings
        for v in spec.variants
    ]


def _cell_pairs(spec: SyntheticSpec, cell: tuple, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Numeric columns of one cell's pairs rows (the string columns are added by the caller)."""
    model, bench, _, tau, variant = cell
    p_all, p_part, pass_at_1, mean_tokens = BENCHMARKS[bench]
    floor = MODELS[model][1]
    lenience = 0.0 if tau is None else (1.0 - tau) * 0.5
    p_all = min(0.95, p_all + lenience + (0.05 if variant else 0.0))
    p_part = min(p_part, 1.0 - p_all)
    base = np.maximum(2, rng.lognormal(np.log(mean_tokens), 0.6, n)).astype(np.int64) + floor - 1
    outcome = rng.choice(3, size=n, p=[p_all, p_part, 1.0 - p_all - p_part])  # 0 all, 1 part, 2 none
    frac = np.where(outcome == 0, 1.0, np.where(outcome == 1, rng.uniform(0.1, 0.9, n), 0.0))
    residual = np.where(outcome == 0, floor, np.ceil(floor + (1 - frac) * base)).astype(np.int64)
    residual = np.where(outcome == 2, np.ceil((base + 1) * rng.uniform(0.95, 1.2, n)), residual).astype(
        np.int64
    )
    draft = np.maximum(0, base - floor + rng.integers(-3, 4, n))
    draft = np.where(rng.random(n) < 0.03, 0, draft)
    accepted = np.where(outcome == 0, draft, (frac * draft).astype(np.int64))
    per_forward = rng.uniform(0.01, 0.03) * rng.lognormal(0.0, 0.1, n)
    q_base = (rng.random(n) < 0.55).astype(float) if pass_at_1 else rng.beta(4, 5, n)
    drop = 0.0 if tau is None else (1.0 - tau) * 0.3
    q_stream = np.where(rng.random(n) < drop, 0.0, q_base)
    segments = np.maximum(1, rng.poisson(spec.mean_segments - 1, n) + 1)
    status = rng.choice(4, size=n, p=[0.92, 0.04, 0.02, 0.02])  # ok, single_segment, empty, error
    segments = np.where(status == 1, 1, np.maximum(segments, 2))
    return {
        "n_segments": segments,
        "status": status,
        "base_forwards": base,
        "residual_forwards": residual,
        "speculative_forwards": (segments - 1) * (1 + base // 2),
        "base_wall_s": base * per_forward * rng.lognormal(0.0, 0.05, n),
        "residual_wall_s": residual * per_forward * rng.lognormal(0.05, 0.05, n),
        "min_residual_forwards": np.full(n, floor),
        "draft_tokens_final": draft,
        "accepted_tokens_final": accepted,
        "base_quality": q_base,
        "stream_quality": q_stream,
    }


def _str(values: list[str | None], index: np.ndarray) -> pa.Array:
    return pc.take(pa.array(values, pa.string()), pa.array(index))


def pairs_table(spec: SyntheticSpec, cell_index: int, n: int, rng: np.random.Generator) -> pa.Table:
    """One cell's pairs rows as an Arrow table with the exact ``PAIRS_SCHEMA``."""
    cell = _cells(spec)[cell_index]
    model, bench, acceptance, tau, variant = cell
    num = _cell_pairs(spec, cell, rng, n)
    status = num.pop("status")
    reasons = [None, "single_segment", "empty_answer", None]
    errors = [None, None, None, "RuntimeError"]
    zeros = np.zeros(n, dtype=np.int64)
    cols: dict[str, pa.Array] = {name: pa.array(v) for name, v in num.items()}
    const = {
        "run_id": spec.run_id,
        "shard_id": f"shard-{cell_index}",
        "cell_id": f"cell-{cell_index}",
        "model": model,
        "family": MODELS[model][0],
        "benchmark": bench,
        "benchmark_version": "1",
        "acceptance": acceptance,
        "variant": variant,
        "verifier_mode": None,
        "device": "cpu",
        "run_order": "base_first",
        "code_version": "synthetic",
        "actor_id": None,
        "sandbox_backend": None,
        "sandbox_view": None,
        "base_score_status": None,
        "stream_score_status": None,
        "error_traceback": None,
        "base_answer": None,
        "stream_answer": None,
        "cell_fingerprint": f"fp-{spec.run_id}-{cell_index}",
        "cell_settings": None,
    }
    for name, value in const.items():
        cols[name] = _str([value], zeros)
    cols["tau"] = pa.array(np.full(n, np.nan if tau is None else tau), mask=np.full(n, tau is None))
    cols["example_id"] = pa.array([f"{bench}/{i}" for i in range(n)], pa.string())
    cols["excluded_reason"] = _str(reasons, status)
    cols["error_type"] = _str(errors, status)
    for name in ("speculative_wall_s", "base_forward_wall_s", "residual_forward_wall_s"):
        cols[name] = pa.array(num["residual_wall_s"] * 0.9)
    for name in ("base_tokens_fed", "residual_tokens_fed", "base_answer_tokens", "stream_answer_tokens"):
        cols[name] = pa.array(num["base_forwards"])
    cols["schema_version"] = pa.array(np.full(n, SCHEMA_VERSION, dtype=np.int64))
    return pa.table([_col(cols, f, n) for f in PAIRS_SCHEMA], schema=PAIRS_SCHEMA)


def steps_table(pairs: pa.Table) -> pa.Table:
    """The steps rows of every row in ``pairs`` (n_segments each; the last one is final and carries
    the pairs row's residual forwards and final draft/accepted lengths)."""
    segs = pairs["n_segments"].to_numpy()
    owner = np.repeat(np.arange(len(segs)), segs)
    starts = np.cumsum(segs) - segs
    step = np.arange(len(owner)) - np.repeat(starts, segs) + 1
    final = step == segs[owner]
    take = pa.array(owner)
    num = {
        n: pairs[n].to_numpy(zero_copy_only=False)[owner]
        for n in (
            "residual_forwards",
            "base_forwards",
            "draft_tokens_final",
            "accepted_tokens_final",
            "residual_wall_s",
        )
    }
    draft_in = np.where(step == 1, 0, np.where(final, num["draft_tokens_final"], num["base_forwards"] // 2))
    accepted = np.where(final, num["accepted_tokens_final"], draft_in // 2)
    forwards = np.where(final, num["residual_forwards"], 1 + num["base_forwards"] // 2)
    cols: dict[str, pa.Array] = {
        n: pc.take(pairs[n], take)
        for n in (
            "run_id",
            "shard_id",
            "cell_id",
            "model",
            "benchmark",
            "acceptance",
            "tau",
            "example_id",
            "verifier_mode",
            "schema_version",
            "code_version",
            "cell_fingerprint",
        )
    }
    cols.update(
        {
            "step": pa.array(step),
            "is_final": pa.array(final),
            "prefix_chars": pa.array(step * 80),
            "draft_tokens_in": pa.array(draft_in),
            "accepted_tokens": pa.array(accepted),
            "generated_tokens": pa.array(forwards - 1),
            "forwards": pa.array(forwards),
            "tokens_fed": pa.array(forwards + draft_in),
            "wall_s": pa.array(forwards * 0.02),
            "forward_wall_s": pa.array(forwards * 0.018),
            "verify_median_prob": pa.array(np.where(draft_in > 0, 0.5, np.nan), mask=draft_in == 0),
            # every other step repeats the previous step's draft
            "draft_fingerprint": pa.array([f"d{o}-{s // 2}" for o, s in zip(owner, step, strict=True)]),
        }
    )
    return pa.table([_col(cols, f, len(owner)) for f in STEPS_SCHEMA], schema=STEPS_SCHEMA)


def _col(cols: dict[str, pa.Array], f: pa.Field, n: int) -> pa.Array:
    """The column of field ``f``; optional record fields the generator does not fill are null."""
    return cols[f.name].cast(f.type) if f.name in cols or not f.nullable else pa.nulls(n, f.type)


def runs_table(spec: SyntheticSpec) -> pa.Table:
    row = {
        "run_id": spec.run_id,
        "grid": "synthetic",
        "config_yaml": "grid: synthetic\n",
        "code_version": "synthetic",
        "host": "localhost",
        "device_inventory": "[]",
        "started_at": "2026-11-30T06:00:00+00:00",
        "finished_at": "2026-11-30T06:10:00+00:00",
        "shards_total": len(_cells(spec)),
        "shards_done": len(_cells(spec)),
        "shards_skipped": 0,
        "schema_version": SCHEMA_VERSION,
    }
    return pa.Table.from_pylist([row], schema=RUNS_SCHEMA)


def write_synthetic_results(
    results_dir: str | Path, spec: SyntheticSpec = SyntheticSpec(), *, with_steps: bool = True
) -> dict[str, int]:
    """Write a whole results directory; returns the row counts per table."""
    root = Path(results_dir)
    rng = np.random.default_rng(spec.seed)
    counts = {"pairs": 0, "steps": 0, "runs": 1}
    for i, _ in enumerate(_cells(spec)):
        pairs = pairs_table(spec, i, spec.examples_per_cell, rng)
        chunks = np.array_split(np.arange(pairs.num_rows), spec.files_per_cell)
        for k, idx in enumerate(chunks):
            part = pairs.take(pa.array(idx))
            write_parquet_atomic(part, root / "pairs" / f"cell-{i}" / f"part-{k}.parquet")
            counts["pairs"] += part.num_rows
            if with_steps:
                steps = steps_table(part)
                write_parquet_atomic(steps, root / "steps" / f"cell-{i}" / f"part-{k}.parquet")
                counts["steps"] += steps.num_rows
    write_parquet_atomic(runs_table(spec), root / "runs" / f"{spec.run_id}.parquet")
    return counts
