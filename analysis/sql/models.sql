-- Table 2 layout: per model setting, its benchmark rows, then the macro average (mean over
-- benchmarks of each benchmark's statistic; a benchmark whose statistic is NULL is skipped),
-- then the pooled row (the statistic over all included requests). Built on the `cells` table.
-- The pair_macros placeholder: the macro row of each declared per-pair column (records.reported; analysis/sql_template.py).
WITH macro AS (
    SELECT
        {cols setting}, NULL::VARCHAR AS benchmark,  -- UNION ALL BY NAME: the column order is the first side's
        'macro' AS scope,
        sum(n_total)::BIGINT AS n_total,
        sum(n_included)::BIGINT AS n_included,
        sum(n_excluded)::BIGINT AS n_excluded,
        sum(n_error)::BIGINT AS n_error,
        count(*) FILTER (WHERE n_included > 0) AS n_benchmarks,
        avg(base_quality_pct) AS base_quality_pct,
        avg(stream_quality_pct) AS stream_quality_pct,
        avg(median_base_forwards) AS median_base_forwards,
        avg(median_residual_forwards) AS median_residual_forwards,
        avg(mean_speedup_forwards) AS mean_speedup_forwards,
        avg(median_speedup_forwards) AS median_speedup_forwards,
        avg(mean_speedup_wall) AS mean_speedup_wall,
        avg(median_speedup_wall) AS median_speedup_wall
        {pair_macros}
    FROM cells
    WHERE scope = 'benchmark'
    GROUP BY {cols setting}
),
unioned AS (
    SELECT * FROM cells
    UNION ALL BY NAME
    SELECT * FROM macro
)
SELECT * FROM unioned
ORDER BY
    {order setting},
    CASE scope WHEN 'benchmark' THEN 0 WHEN 'macro' THEN 1 ELSE 2 END, benchmark;
