-- The share of the attainable speedup, two ways, per cell (scope 'benchmark'), the macro average
-- over a setting's benchmarks ('macro') and pooled over its requests ('pooled'):
--   median_speedup_forwards   median of base_forwards / residual_forwards
--   median_attainable         median of base_forwards / min_residual_forwards (the family's floor)
--   share_of_medians          median_speedup_forwards / median_attainable: the paper's "share of the
--                             attainable speedup" (a ratio of medians; macro: of the macro medians)
--   median_achieved           the per-example share, median of speedup / attainable (distribution.sql)
WITH per_group AS (
    SELECT
        model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag,
        CASE WHEN GROUPING(benchmark) = 1 THEN 'pooled' ELSE 'benchmark' END AS scope,
        count(*) FILTER (WHERE is_included) AS n_included,
        quantile_cont(s_fwd, 0.5) AS median_speedup_forwards,
        quantile_cont(attainable, 0.5) AS median_attainable,
        quantile_cont(s_fwd, 0.5) / NULLIF(quantile_cont(attainable, 0.5), 0) AS share_of_medians,
        quantile_cont(achieved, 0.5) AS median_achieved
    FROM pair_rows
    GROUP BY GROUPING SETS (
        (model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag),
        (model, acceptance, tau, variant, verifier_mode, settings_tag)
    )
),
macro AS (
    SELECT
        model, NULL::VARCHAR AS benchmark, acceptance, tau, variant, verifier_mode, settings_tag,
        'macro' AS scope,
        sum(n_included)::BIGINT AS n_included,
        avg(median_speedup_forwards) AS median_speedup_forwards,
        avg(median_attainable) AS median_attainable,
        avg(median_speedup_forwards) / NULLIF(avg(median_attainable), 0) AS share_of_medians,
        avg(median_achieved) AS median_achieved
    FROM per_group
    WHERE scope = 'benchmark'
    GROUP BY model, acceptance, tau, variant, verifier_mode, settings_tag
)
SELECT * FROM (SELECT * FROM per_group UNION ALL BY NAME SELECT * FROM macro)
ORDER BY
    model, acceptance, tau NULLS FIRST, variant NULLS FIRST, verifier_mode NULLS FIRST, settings_tag NULLS FIRST,
    CASE scope WHEN 'benchmark' THEN 0 WHEN 'macro' THEN 1 ELSE 2 END, benchmark;
