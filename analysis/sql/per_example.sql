-- Per-example speedups of included requests (the data behind the distribution figures).
SELECT
    model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag, example_id,
    s_fwd AS speedup_forwards,
    s_wall AS speedup_wall
FROM pair_rows
WHERE is_included AND s_fwd IS NOT NULL
ORDER BY
    model, acceptance, tau NULLS FIRST, variant NULLS FIRST, verifier_mode NULLS FIRST, settings_tag NULLS FIRST,
    benchmark, run_id, example_id;
