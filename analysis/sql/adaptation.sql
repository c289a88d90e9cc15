-- Table 3: adaptation before -> after. "before" is the plain model (variant NULL), "after" each
-- named variant, matched on (model, benchmark, acceptance, tau, verifier_mode, settings tag): an
-- adapted model's rows carry the plain model's name in `model` and their label in `variant`
-- (ModelConfig.base_model). The 'average' row (benchmark NULL, scope 'macro') averages only the
-- benchmarks present on both sides.
--   accept_ratio_*      step_summary's accept_ratio_all (accepted / draft tokens over all steps)
--   preserved_share_*   sum(accepted_tokens_final) / sum(draft_tokens_final) over the cell's included
--                       requests: the share of draft tokens the final verify keeps (paper §7: 0.27 -> 0.43)
--   one_forward_share_* distribution's share_one_forward: residual_forwards = 1 (paper §7: 9.6 % -> 15.9 %)
WITH c AS (
    SELECT x.*, d.share_one_forward, s.accept_ratio_all, p.preserved_share
    FROM cells x
    LEFT JOIN distribution d
      ON d.scope = 'benchmark' AND d.model = x.model AND d.benchmark = x.benchmark
     AND d.acceptance = x.acceptance AND d.tau IS NOT DISTINCT FROM x.tau
     AND d.variant IS NOT DISTINCT FROM x.variant AND d.verifier_mode IS NOT DISTINCT FROM x.verifier_mode
     AND d.settings_tag IS NOT DISTINCT FROM x.settings_tag
    LEFT JOIN step_summary s
      ON s.model = x.model AND s.benchmark = x.benchmark
     AND s.acceptance = x.acceptance AND s.tau IS NOT DISTINCT FROM x.tau
     AND s.variant IS NOT DISTINCT FROM x.variant AND s.verifier_mode IS NOT DISTINCT FROM x.verifier_mode
     AND s.settings_tag IS NOT DISTINCT FROM x.settings_tag
    LEFT JOIN (
        SELECT model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag,
               sum(accepted_final)::DOUBLE / NULLIF(sum(draft_final), 0) AS preserved_share
        FROM pair_rows
        GROUP BY ALL
    ) p
      ON p.model = x.model AND p.benchmark = x.benchmark AND p.acceptance = x.acceptance
     AND p.tau IS NOT DISTINCT FROM x.tau AND p.variant IS NOT DISTINCT FROM x.variant
     AND p.verifier_mode IS NOT DISTINCT FROM x.verifier_mode
     AND p.settings_tag IS NOT DISTINCT FROM x.settings_tag
    WHERE x.scope = 'benchmark'
),
matched AS (
    SELECT
        a.model, a.benchmark, a.acceptance, a.tau, a.variant, a.verifier_mode, a.settings_tag,
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
        b.accept_ratio_all AS accept_ratio_before,
        a.accept_ratio_all AS accept_ratio_after,
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
     AND a.settings_tag IS NOT DISTINCT FROM b.settings_tag
),
macro AS (
    SELECT
        model, NULL::VARCHAR AS benchmark, acceptance, tau, variant, verifier_mode, settings_tag,
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
        avg(accept_ratio_before) AS accept_ratio_before,
        avg(accept_ratio_after) AS accept_ratio_after,
        avg(preserved_share_before) AS preserved_share_before,
        avg(preserved_share_after) AS preserved_share_after,
        avg(one_forward_share_before) AS one_forward_share_before,
        avg(one_forward_share_after) AS one_forward_share_after
    FROM matched
    GROUP BY model, acceptance, tau, variant, verifier_mode, settings_tag
)
SELECT * FROM (SELECT * FROM matched UNION ALL BY NAME SELECT * FROM macro)
ORDER BY
    model, variant, acceptance, tau NULLS FIRST, verifier_mode NULLS FIRST, settings_tag NULLS FIRST,
    CASE scope WHEN 'benchmark' THEN 0 ELSE 1 END, benchmark;
