-- The share of the attainable speedup, two ways, per cell (scope 'benchmark'), the macro average
-- over a setting's benchmarks ('macro') and pooled over its requests ('pooled'):
--   median_speedup_forwards   median of base_forwards / residual_forwards
--   median_attainable         median of base_forwards / min_residual_forwards (the family's floor)
--   share_of_medians          median_speedup_forwards / median_attainable: the paper's "share of the
--                             attainable speedup" (a ratio of medians; macro: of the macro medians)
--   median_achieved           the per-example share, median of speedup / attainable (distribution.sql)
WITH per_group AS (
    SELECT
        {cols cell},
        CASE WHEN GROUPING(benchmark) = 1 THEN 'pooled' ELSE 'benchmark' END AS scope,
        count(*) FILTER (WHERE is_included) AS n_included,
        quantile_cont(s_fwd, 0.5) AS median_speedup_forwards,
        quantile_cont(attainable, 0.5) AS median_attainable,
        quantile_cont(s_fwd, 0.5) / NULLIF(quantile_cont(attainable, 0.5), 0) AS share_of_medians,
        quantile_cont(achieved, 0.5) AS median_achieved
    FROM pair_rows
    GROUP BY GROUPING SETS (
        ({cols cell}),
        ({cols setting})
    )
),
macro AS (
    SELECT
        {cols setting}, NULL::VARCHAR AS benchmark,  -- UNION ALL BY NAME: the column order is the first side's
        'macro' AS scope,
        sum(n_included)::BIGINT AS n_included,
        avg(median_speedup_forwards) AS median_speedup_forwards,
        avg(median_attainable) AS median_attainable,
        avg(median_speedup_forwards) / NULLIF(avg(median_attainable), 0) AS share_of_medians,
        avg(median_achieved) AS median_achieved
    FROM per_group
    WHERE scope = 'benchmark'
    GROUP BY {cols setting}
)
SELECT * FROM (SELECT * FROM per_group UNION ALL BY NAME SELECT * FROM macro)
ORDER BY
    {order setting},
    CASE scope WHEN 'benchmark' THEN 0 WHEN 'macro' THEN 1 ELSE 2 END, benchmark;
