-- Per-example speedups of included requests (the data behind the distribution figures).
SELECT
    {cols cell}, example_id,
    s_fwd AS speedup_forwards,
    s_wall AS speedup_wall
FROM pair_rows
WHERE is_included AND s_fwd IS NOT NULL
ORDER BY
    {order setting},
    benchmark, run_id, example_id;
