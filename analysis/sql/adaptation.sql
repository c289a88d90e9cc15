-- Table 3: adaptation before -> after. "before" is the plain model (variant NULL), "after" each
-- named variant, matched on (model, benchmark, acceptance, tau, verifier_mode). The 'average' row
-- (benchmark NULL, scope 'macro') averages only the benchmarks present on both sides.
WITH c AS (SELECT * FROM cells WHERE scope = 'benchmark'),
matched AS (
    SELECT
        a.model, a.benchmark, a.acceptance, a.tau, a.variant, a.verifier_mode,
        'benchmark' AS scope,
        b.n_included AS n_before,
        a.n_included AS n_after,
        b.stream_quality_pct AS quality_before_pct,
        a.stream_quality_pct AS quality_after_pct,
        b.median_speedup_forwards AS median_speedup_before,
        a.median_speedup_forwards AS median_speedup_after,
        b.mean_speedup_forwards AS mean_speedup_before,
        a.mean_speedup_forwards AS mean_speedup_after,
        b.median_speedup_wall AS median_speedup_wall_before,
        a.median_speedup_wall AS median_speedup_wall_after
    FROM c a
    JOIN c b
      ON b.variant IS NULL AND a.variant IS NOT NULL
     AND a.model = b.model AND a.benchmark = b.benchmark AND a.acceptance = b.acceptance
     AND a.tau IS NOT DISTINCT FROM b.tau
     AND a.verifier_mode IS NOT DISTINCT FROM b.verifier_mode
),
macro AS (
    SELECT
        model, NULL::VARCHAR AS benchmark, acceptance, tau, variant, verifier_mode,
        'macro' AS scope,
        sum(n_before)::BIGINT AS n_before,
        sum(n_after)::BIGINT AS n_after,
        avg(quality_before_pct) AS quality_before_pct,
        avg(quality_after_pct) AS quality_after_pct,
        avg(median_speedup_before) AS median_speedup_before,
        avg(median_speedup_after) AS median_speedup_after,
        avg(mean_speedup_before) AS mean_speedup_before,
        avg(mean_speedup_after) AS mean_speedup_after,
        avg(median_speedup_wall_before) AS median_speedup_wall_before,
        avg(median_speedup_wall_after) AS median_speedup_wall_after
    FROM matched
    GROUP BY model, acceptance, tau, variant, verifier_mode
)
SELECT * FROM (SELECT * FROM matched UNION ALL BY NAME SELECT * FROM macro)
ORDER BY
    model, variant, acceptance, tau NULLS FIRST, verifier_mode NULLS FIRST,
    CASE scope WHEN 'benchmark' THEN 0 ELSE 1 END, benchmark;
