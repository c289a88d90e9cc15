-- Every cell fingerprint in the directory: its cell name, the settings that tell it apart from the
-- other fingerprints of that name (settings_tag), whether the tables use it (kept; --latest drops
-- all but the most recent run's), and how many rows it has: n_rows as written, n_examples counted
-- (each example once), n_duplicates = n_rows - n_examples (the same example written by several runs).
SELECT
    model, benchmark, acceptance, tau, variant, verifier_mode,
    t.settings_tag,
    k.cell_fingerprint,
    t.kept,
    t.n_fingerprints,
    count(*) AS n_rows,
    count(DISTINCT example_id) AS n_examples,
    count(*) - count(DISTINCT example_id) AS n_duplicates,
    count(DISTINCT run_id) AS n_runs,
    min(run_id) AS first_run,
    max(run_id) AS last_run
FROM pairs_keyed k
JOIN cell_tags t ON k.cell_fingerprint = t.cell_fingerprint
GROUP BY ALL
ORDER BY
    model, acceptance, tau NULLS FIRST, variant NULLS FIRST, verifier_mode NULLS FIRST, benchmark,
    settings_tag NULLS FIRST, cell_fingerprint;
