-- Table 3: adaptation before -> after. "before" is the plain model (variant NULL), "after" each
-- named variant, matched on (model, benchmark, acceptance, tau, verifier_mode): an adapted model's
-- rows carry the plain model's name in `model` and their label in `variant` (ModelConfig.base_model).
-- The 'average' row (benchmark NULL, scope 'macro') averages only the benchmarks present on both sides.
--   preserved_share   sum(accepted_tokens_final) / sum(draft_tokens_final) over the cell's included
--                     requests: the share of draft tokens the final verify keeps (paper §7: 0.27 -> 0.43)
--   one_forward_share share of included requests finishing in one residual forward (9.6 % -> 15.9 %)
WITH c AS (
    SELECT c.*, d.share_one_forward, p.preserved_share
    FROM cells c
    JOIN distribution d
      ON d.scope = 'benchmark' AND d.model = c.model AND d.benchmark = c.benchmark
     AND d.acceptance = c.acceptance AND d.tau IS NOT DISTINCT FROM c.tau
     AND d.variant IS NOT DISTINCT FROM c.variant AND d.verifier_mode IS NOT DISTINCT FROM c.verifier_mode
    LEFT JOIN (
        SELECT model, benchmark, acceptance, tau, variant, verifier_mode,
               sum(accepted_final)::DOUBLE / NULLIF(sum(draft_final), 0) AS preserved_share
        FROM pair_rows
        GROUP BY ALL
    ) p
      ON p.model = c.model AND p.benchmark = c.benchmark AND p.acceptance = c.acceptance
     AND p.tau IS NOT DISTINCT FROM c.tau AND p.variant IS NOT DISTINCT FROM c.variant
     AND p.verifier_mode IS NOT DISTINCT FROM c.verifier_mode
    WHERE c.scope = 'benchmark'
),
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
        a.median_speedup_wall AS median_speedup_wall_after,
        b.preserved_share AS preserved_share_before,
        a.preserved_share AS preserved_share_after,
        b.share_one_forward AS one_forward_share_before,
        a.share_one_forward AS one_forward_share_after
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
        avg(median_speedup_wall_after) AS median_speedup_wall_after,
        avg(preserved_share_before) AS preserved_share_before,
        avg(preserved_share_after) AS preserved_share_after,
        avg(one_forward_share_before) AS one_forward_share_before,
        avg(one_forward_share_after) AS one_forward_share_after
    FROM matched
    GROUP BY model, acceptance, tau, variant, verifier_mode
)
SELECT * FROM (SELECT * FROM matched UNION ALL BY NAME SELECT * FROM macro)
ORDER BY
    model, variant, acceptance, tau NULLS FIRST, verifier_mode NULLS FIRST,
    CASE scope WHEN 'benchmark' THEN 0 ELSE 1 END, benchmark;
