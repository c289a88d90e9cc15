"""The report's tables as columns: for each table, which of its columns the markdown shows, under
which heading, in which format (``analysis.render.Column``: num, pct, x, share).

Table 1 is ``TABLE1`` plus the per-pair columns ``PairRecord`` declares (``table1()``; docs/analysis.md,
"Grouping"). The sections that lay these tables out: ``analysis.report_sections``.
"""

from __future__ import annotations

from analysis.render import Column
from analysis.sql_template import declared_columns

KEY_COLS = [Column("setting", "Model · setting"), Column("row", "Benchmark")]
TABLE1 = [
    *KEY_COLS,
    Column("n_total", "n", "num"),
    Column("n_included", "incl.", "num"),
    Column("n_excluded", "excl.", "num"),
    Column("n_error", "err.", "num"),
    Column("base_quality_pct", "Quality base (%)", "pct"),
    Column("stream_quality_pct", "stream (%)", "pct"),
    Column("median_base_forwards", "Fwd after final: base", "num"),
    Column("median_residual_forwards", "stream", "num"),
    Column("mean_speedup_forwards", "Speedup fwd: mean", "x"),
    Column("median_speedup_forwards", "median", "x"),
    Column("mean_speedup_wall", "Speedup wall: mean", "x"),
    Column("median_speedup_wall", "median", "x"),
]


def table1() -> list[Column]:
    """Table 1's columns: ``TABLE1`` and then every per-pair column ``PairRecord`` declares for the
    report (``streamgen.results.records.reported``; cells.sql aggregates it under its name)."""
    return [*TABLE1, *(Column(spec.name, spec.label, spec.kind) for _, spec in declared_columns())]


TABLE2 = [
    *KEY_COLS,
    Column("n_included", "n", "num"),
    *[c for c in TABLE1 if c.name.endswith(("_pct", "speedup_forwards", "speedup_wall"))],
]
GAIN = [
    *KEY_COLS,
    Column("n_included", "n", "num"),
    Column("share_below_1x", "< 1×", "share"),
    Column("share_below_0_9x", "< 0.9×", "share"),
    Column("share_below_0_8x", "< 0.8×", "share"),
    Column("share_below_1x_wall", "< 1× wall", "share"),
    Column("median_speedup_losers", "median of losers (×)", "x"),
    Column("share_one_forward", "1 residual fwd", "share"),
    Column("share_at_floor", "at floor", "share"),
]
KEPT = [
    *KEY_COLS,
    Column("share_keep_none", "keep none", "share"),
    Column("share_keep_all", "keep all", "share"),
    Column("share_keep_part", "keep part", "share"),
    Column("share_no_draft", "no draft", "share"),
    Column("share_first_draft", "answer = first draft", "share"),
]
LIMIT = [
    *KEY_COLS,
    Column("median_attainable", "attainable limit (median ×)", "x"),
    Column("median_achieved", "share achieved (median)", "share"),
    Column("mean_overhead", "overhead: mean ×", "x"),
    Column("median_overhead", "median ×", "x"),
    Column("share_forwards_removed", "forwards removed (Σ)", "share"),
]
EXCLUSIONS = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("kind", "Kind"),
    Column("reason", "Reason"),
    Column("n", "n", "num"),
]
RESCORED = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("scorer_version_before", "Scorer at decoding"),
    Column("scorer_version", "Scorer now"),
    Column("n_rescored", "Re-scored", "num"),
    Column("n_changed", "Quality changed", "num"),
    Column("examples_changed", "Examples changed"),
]
ADAPT = [
    Column("setting", "Model · variant"),
    Column("row", "Benchmark"),
    Column("n_before", "n before", "num"),
    Column("n_after", "n after", "num"),
    Column("quality_before_pct", "quality before (%)", "pct"),
    Column("quality_after_pct", "after (%)", "pct"),
    Column("median_speedup_before", "median speedup before", "x"),
    Column("median_speedup_after", "after", "x"),
    Column("mean_speedup_before", "mean before", "x"),
    Column("mean_speedup_after", "after", "x"),
    Column("accept_ratio_before", "accept ratio before", "share"),
    Column("accept_ratio_after", "after", "share"),
    Column("preserved_share_before", "draft preserved before", "share"),
    Column("preserved_share_after", "after", "share"),
    Column("one_forward_share_before", "1 residual fwd before", "share"),
    Column("one_forward_share_after", "after", "share"),
]
ADAPT_CI = [
    Column("setting", "Model · variant"),
    Column("bench", "Benchmark"),
    Column("n_shown", "n paired"),
    Column("metric", "Metric"),
    Column("plain", "plain"),
    Column("adapted", "adapted"),
    Column("diff", "Δ (adapted − plain)"),
    Column("interval", "95 % interval of Δ"),
]
ADAPT_CI_METRICS = (  # adaptation_ci's column prefix, label, format (wall shown in ms)
    ("preserved_share", "draft preserved", "share"),
    ("kept_whole_share", "kept whole draft", "share"),
    ("one_forward_share", "1 residual fwd", "share"),
    ("mean_residual_forwards", "mean residual fwd", "x"),
    ("mean_residual_wall_s", "mean residual wall (ms)", "ms"),
    ("median_speedup_forwards", "median speedup fwd", "x"),
    ("median_speedup_wall", "median speedup wall", "x"),
    ("stream_quality_pct", "stream quality (%)", "pct"),
)
ATTAIN = [
    *KEY_COLS,
    Column("n_included", "n", "num"),
    Column("median_speedup_forwards", "median speedup", "x"),
    Column("median_attainable", "median attainable", "x"),
    Column("share_of_medians", "share (ratio of medians)", "share"),
    Column("median_achieved", "share (per-example median)", "share"),
]
CROSS = [
    *KEY_COLS,
    Column("speed", "Speed"),
    Column("answer", "Answer"),
    Column("n", "n", "num"),
    Column("share", "share", "share"),
    Column("n_quality_changed", "quality changed", "num"),
    Column("n_quality_up", "up", "num"),
    Column("n_quality_down", "down", "num"),
    Column("mean_quality_delta", "mean Δ quality", "x"),
]
STABLE = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("n_examples", "n", "num"),
    Column("n_steps_compared", "steps compared", "num"),
    Column("share_steps_unchanged", "draft unchanged from previous step", "share"),
    Column("share_final_unchanged", "final answer = previous draft", "share"),
]
DIVERGENCE = [
    Column("setting", "Model · setting"),
    Column("dtype", "dtype"),
    Column("benchmark", "Benchmark"),
    Column("n", "n", "num"),
    Column("equality_rate", "stream = base", "share"),
    Column("diverged", "diverged", "num"),
    Column("margin_p50", "margin p50 (sp)", "num"),
    Column("near_tie_le1", "≤ 1 sp", "share"),
    Column("near_tie_le4", "≤ 4 sp", "share"),
    Column("draft_branch_share", "draft branch", "share"),
    Column("draft_after_mean", "draft tokens after", "num"),
    Column("dq_mean", "Δq diverged", "x"),
    Column("dq_lo", "95 % lo", "x"),
    Column("dq_hi", "95 % hi", "x"),
    Column("dq_all", "Δq all", "x"),
    Column("accepted_mean", "accepted", "num"),
    Column("residual_fwd_mean", "residual fwd", "num"),
]

BY_MODEL = [
    Column("setting", "Model · setting"),
    Column("n", "n", "num"),
    Column("n_benchmarks", "benchmarks", "num"),
    Column("median_speedup_forwards", "median ×", "x"),
    Column("mean_speedup_forwards", "mean ×", "x"),
    Column("min_speedup_forwards", "min ×", "x"),
    Column("max_speedup_forwards", "max ×", "x"),
    Column("share_below_1x", "< 1×", "share"),
]
PRINTS = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("cell_fingerprint", "Fingerprint"),
    Column("kept", "used"),
    Column("n_rows", "rows", "num"),
    Column("n_examples", "examples", "num"),
    Column("n_duplicates", "duplicates", "num"),
    Column("n_runs", "runs", "num"),
    Column("last_run", "last run"),
]
SWEEP = [
    Column("setting", "Model · setting"),
    Column("row", "Benchmark"),
    Column("n_included", "n", "num"),
    Column("stream_quality_pct", "stream quality (%)", "pct"),
    Column("quality_delta_pct", "Δ vs base", "pct"),
    Column("median_speedup_forwards", "median speedup fwd", "x"),
    Column("mean_speedup_forwards", "mean", "x"),
    Column("median_speedup_wall", "median wall", "x"),
]
STEPS = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("n_examples", "n", "num"),
    Column("mean_steps", "steps / request", "x"),
    Column("mean_speculative_forwards", "speculative fwd / request", "x"),
    Column("accept_ratio_all", "accepted / draft (all steps)", "share"),
    Column("accept_ratio_final", "(final step)", "share"),
    Column("n_residual_mismatch", "residual mismatch", "num"),
]
RUNS = [
    Column("run_id", "Run"),
    Column("grid", "Grid"),
    Column("code_version", "Code"),
    Column("host", "Host"),
    Column("started_at", "Started"),
    Column("finished_at", "Finished"),
    Column("status", "Status"),
    Column("shards_done", "shards done", "num"),
    Column("shards_skipped", "skipped", "num"),
    Column("shards_total", "total", "num"),
    Column("forwards_executed", "model calls executed", "num"),
]
COMPARE = [
    Column("setting", "Model · setting"),
    Column("row", "Benchmark"),
    *[
        Column(f"{name}_{side}", f"{head} {side.upper() if side != 'delta' else 'Δ'}", kind)
        for name, head, kind in (
            ("stream_quality_pct", "quality", "pct"),
            ("median_speedup_forwards", "median fwd", "x"),
            ("median_speedup_wall", "median wall", "x"),
        )
        for side in ("a", "b", "delta")
    ],
]
