-- Two runs side by side: the `models` table of run A (view models_a) and of run B (models_b),
-- matched on the row key; *_delta = B - A. Rows present on one side only keep NULLs on the other.
SELECT * FROM (
SELECT
    {coalesce setting a b},
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
  ON {match setting a b}
 AND a.scope = b.scope AND a.benchmark IS NOT DISTINCT FROM b.benchmark  -- macro and pooled rows: benchmark NULL
)
ORDER BY
    {order setting},
    CASE scope WHEN 'benchmark' THEN 0 WHEN 'macro' THEN 1 ELSE 2 END, benchmark;
