-- Every cell fingerprint in the directory: its cell name, the settings that tell it apart from the
-- other fingerprints of that name (settings_tag), whether the tables use it (kept; --latest drops
-- all but the most recent run's), and how many rows it has: n_rows as written, n_examples counted
-- (each example once), n_duplicates = n_rows - n_examples (the same example written by several runs).
-- The duplicates come from _dedup.sql's pair_dups (the (fingerprint, example) keys written more than
-- once, with their row counts) instead of a count(DISTINCT example_id) over every row; a
-- fingerprint hashes its cell name, so its rows share one name.
WITH dups AS (
    SELECT cell_fingerprint, sum(n_rows - 1)::BIGINT AS n_duplicates
    FROM pair_dups
    GROUP BY cell_fingerprint
),
per_fingerprint AS (
    SELECT
        {cols name}, t.settings_tag,
        k.cell_fingerprint,
        t.kept,
        t.n_fingerprints,
        count(*) AS n_rows,
        count(DISTINCT run_id) AS n_runs,
        min(run_id) AS first_run,
        max(run_id) AS last_run
    FROM pairs_keyed k
    JOIN cell_tags t ON k.cell_fingerprint = t.cell_fingerprint
    GROUP BY ALL
)
SELECT
    {cols cell f},
    f.cell_fingerprint, f.kept, f.n_fingerprints, f.n_rows,
    f.n_rows - coalesce(d.n_duplicates, 0) AS n_examples,
    coalesce(d.n_duplicates, 0) AS n_duplicates,
    f.n_runs, f.first_run, f.last_run
FROM per_fingerprint f
LEFT JOIN dups d ON d.cell_fingerprint IS NOT DISTINCT FROM f.cell_fingerprint
ORDER BY
    {order name -benchmark}, benchmark,  -- a name's fingerprints together
    settings_tag NULLS FIRST, cell_fingerprint;
