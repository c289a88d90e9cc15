-- Quality against median speedup across acceptance settings (greedy, then each tau ascending),
-- per benchmark and for the macro average (benchmark NULL). Built on the `models` table.
SELECT
    {cols setting -acceptance -tau}, scope, benchmark, acceptance, tau,
    n_included,
    base_quality_pct,
    stream_quality_pct,
    stream_quality_pct - base_quality_pct AS quality_delta_pct,
    median_speedup_forwards,
    mean_speedup_forwards,
    median_speedup_wall
FROM models
WHERE scope IN ('benchmark', 'macro')
ORDER BY
    {order setting -acceptance -tau},
    CASE scope WHEN 'benchmark' THEN 0 ELSE 1 END, benchmark,
    CASE acceptance WHEN 'greedy' THEN 0 ELSE 1 END, acceptance, tau NULLS FIRST;
