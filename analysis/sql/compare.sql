-- Two runs side by side: the `models` table of run A (view models_a) and of run B (models_b),
-- matched on the row key; *_delta = B - A. Rows present on one side only keep NULLs on the other.
SELECT * FROM (
SELECT
    coalesce(a.model, b.model) AS model,
    coalesce(a.acceptance, b.acceptance) AS acceptance,
    coalesce(a.tau, b.tau) AS tau,
    coalesce(a.variant, b.variant) AS variant,
    coalesce(a.verifier_mode, b.verifier_mode) AS verifier_mode,
    coalesce(a.settings_tag, b.settings_tag) AS settings_tag,
    coalesce(a.scope, b.scope) AS scope,
    coalesce(a.benchmark, b.benchmark) AS benchmark,
    a.n_included AS n_included_a,
    b.n_included AS n_included_b,
    a.base_quality_pct AS base_quality_pct_a,
    b.base_quality_pct AS base_quality_pct_b,
    b.base_quality_pct - a.base_quality_pct AS base_quality_pct_delta,
    a.stream_quality_pct AS stream_quality_pct_a,
    b.stream_quality_pct AS stream_quality_pct_b,
    b.stream_quality_pct - a.stream_quality_pct AS stream_quality_pct_delta,
    a.mean_speedup_forwards AS mean_speedup_forwards_a,
    b.mean_speedup_forwards AS mean_speedup_forwards_b,
    b.mean_speedup_forwards - a.mean_speedup_forwards AS mean_speedup_forwards_delta,
    a.median_speedup_forwards AS median_speedup_forwards_a,
    b.median_speedup_forwards AS median_speedup_forwards_b,
    b.median_speedup_forwards - a.median_speedup_forwards AS median_speedup_forwards_delta,
    a.median_speedup_wall AS median_speedup_wall_a,
    b.median_speedup_wall AS median_speedup_wall_b,
    b.median_speedup_wall - a.median_speedup_wall AS median_speedup_wall_delta
FROM models_a a
FULL OUTER JOIN models_b b
  ON a.model = b.model AND a.scope = b.scope AND a.acceptance = b.acceptance
 AND a.benchmark IS NOT DISTINCT FROM b.benchmark
 AND a.tau IS NOT DISTINCT FROM b.tau
 AND a.variant IS NOT DISTINCT FROM b.variant
 AND a.verifier_mode IS NOT DISTINCT FROM b.verifier_mode
 AND a.settings_tag IS NOT DISTINCT FROM b.settings_tag
)
ORDER BY
    model, acceptance, tau NULLS FIRST, variant NULLS FIRST, verifier_mode NULLS FIRST, settings_tag NULLS FIRST,
    CASE scope WHEN 'benchmark' THEN 0 WHEN 'macro' THEN 1 ELSE 2 END, benchmark;
