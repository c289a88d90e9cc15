-- Paper Figure 2's numbers: per model setting, the per-example residual speedups (forwards) of
-- all its included requests pooled over benchmarks: count, median, mean, extremes, share below 1x.
SELECT
    {cols setting},
    count(*) AS n,
    count(DISTINCT benchmark) AS n_benchmarks,
    quantile_cont(s_fwd, 0.5) AS median_speedup_forwards,
    avg(s_fwd) AS mean_speedup_forwards,
    min(s_fwd) AS min_speedup_forwards,
    max(s_fwd) AS max_speedup_forwards,
    avg((s_fwd < 1)::DOUBLE) AS share_below_1x
FROM pair_rows
WHERE is_included AND s_fwd IS NOT NULL
GROUP BY {cols setting}
ORDER BY {order setting};
