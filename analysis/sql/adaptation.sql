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
      ON d.scope = 'benchmark' AND {match cell d x}
    LEFT JOIN step_summary s
      ON {match cell s x}
    LEFT JOIN (
        SELECT {cols cell},
               sum(accepted_final)::DOUBLE / NULLIF(sum(draft_final), 0) AS preserved_share
        FROM pair_rows
        GROUP BY ALL
    ) p
      ON {match cell p x}
    WHERE x.scope = 'benchmark'
),
matched AS (
    SELECT
        {cols cell a},
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
     AND {match cell -variant a b}  -- the plain model's row of the same setting
),
macro AS (
    SELECT
        {cols setting}, NULL::VARCHAR AS benchmark,  -- UNION ALL BY NAME: the column order is the first side's
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
    GROUP BY {cols setting}
)
SELECT * FROM (SELECT * FROM matched UNION ALL BY NAME SELECT * FROM macro)
ORDER BY
    model, variant, {order setting -model -variant},  -- each variant's rows together
    CASE scope WHEN 'benchmark' THEN 0 ELSE 1 END, benchmark;
