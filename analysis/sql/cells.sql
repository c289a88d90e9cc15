-- Table 1 layout, one row per cell (scope 'benchmark') plus one pooled row per model setting
-- (scope 'pooled', benchmark NULL: the statistic over all that setting's included requests).
-- n_benchmarks: benchmarks with at least one included request.
-- Quality in percent; forwards are medians; speedups are per-example ratios summarised.
-- The pair_aggregates placeholder: the per-pair columns PairRecord declares (records.reported), written out by analysis/sql_template.py.
SELECT
    {cols cell},
    CASE WHEN GROUPING(benchmark) = 1 THEN 'pooled' ELSE 'benchmark' END AS scope,
    CASE WHEN GROUPING(benchmark) = 0 THEN any_value(quality_metric) END AS quality_metric,
    count(*) AS n_total,
    count(*) FILTER (WHERE is_included) AS n_included,
    count(*) FILTER (WHERE is_excluded) AS n_excluded,
    count(*) FILTER (WHERE is_error) AS n_error,
    count(DISTINCT benchmark) FILTER (WHERE is_included) AS n_benchmarks,
    100 * avg(q_base) AS base_quality_pct,
    100 * avg(q_stream) AS stream_quality_pct,
    quantile_cont(f_base, 0.5) AS median_base_forwards,
    quantile_cont(f_residual, 0.5) AS median_residual_forwards,
    avg(s_fwd) AS mean_speedup_forwards,
    quantile_cont(s_fwd, 0.5) AS median_speedup_forwards,
    avg(s_wall) AS mean_speedup_wall,
    quantile_cont(s_wall, 0.5) AS median_speedup_wall
    {pair_aggregates}
FROM pair_rows
GROUP BY GROUPING SETS (
    ({cols cell}),
    ({cols setting})
)
ORDER BY
    {order setting},
    scope, benchmark;
