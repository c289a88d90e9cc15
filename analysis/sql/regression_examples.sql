-- The nightly comparison's exact per-example fields (analysis/regression.py): every pairs row,
-- included or not, each (cell fingerprint, example) once as in every table; `copies` counts that
-- example's rows in the files, so a directory that mixes runs is refused rather than deduplicated.
SELECT
    {cols name -variant p}, p.cell_fingerprint, p.example_id,  -- the nightly's cell: no variants
    p.base_forwards, p.residual_forwards, p.speculative_forwards,
    p.draft_tokens_final, p.accepted_tokens_final, p.base_answer_tokens, p.stream_answer_tokens,
    p.excluded_reason, p.error_type,
    k.copies
FROM pairs p
JOIN (
    SELECT cell_fingerprint, example_id, count(*) AS copies FROM pairs_keyed GROUP BY ALL
) k USING (cell_fingerprint, example_id)
ORDER BY ALL;
