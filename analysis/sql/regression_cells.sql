-- The nightly comparison's statistics per cell (analysis/regression.py), read from the same
-- pair_rows view as the report: "included", the forward and wall speedups and the quality columns
-- are defined once, in _views.sql, so a change there moves the nightly numbers too.
-- A cell here is one fingerprint (every result-defining setting); the nightly names it by
-- model / benchmark / acceptance / τ / verifier mode and refuses two fingerprints under one name.
--   n                       included requests
--   base_quality            mean over included requests (0..1, not percent)
--   median_forward_speedup  median per-example base / residual forwards (Table 1's median)
--   median_wall_speedup     median per-example base / residual wall clock
--   median_base_wall_s      median base wall clock of the included requests
SELECT
    {cols name -variant r}, r.cell_fingerprint,  -- the nightly's cell: no variants
    count(*) FILTER (WHERE r.is_included) AS n,
    avg(r.q_base) AS base_quality,
    avg(r.q_stream) AS stream_quality,
    quantile_cont(r.s_fwd, 0.5) AS median_forward_speedup,
    quantile_cont(r.s_wall, 0.5) AS median_wall_speedup,
    quantile_cont(p.base_wall_s, 0.5) FILTER (WHERE r.is_included) AS median_base_wall_s
FROM pair_rows r
JOIN pairs p USING (cell_fingerprint, example_id)
GROUP BY {cols name -variant r}, r.cell_fingerprint
ORDER BY ALL;
