-- Row-level view every table builds on (the runner executes this file first).
-- One row per pairs row. Derived columns are NULL unless the row is included, so an aggregate
-- over them can never see an excluded or error row.
--   is_error     error_type IS NOT NULL (wins over an exclusion reason)
--   is_excluded  excluded_reason IS NOT NULL and no error
--   is_included  neither
--   first_draft_kept  the stream answer equals the first stream step's draft (a stale draft, §6.5)
-- The pair_columns placeholder: the per-pair fields PairRecord declares for the report (records.reported), NULL unless included.
CREATE OR REPLACE TEMP VIEW pair_rows AS
WITH flagged AS (
    SELECT
        *,
        error_type IS NOT NULL AS is_error,
        error_type IS NULL AND excluded_reason IS NOT NULL AS is_excluded,
        error_type IS NULL AND excluded_reason IS NULL AS is_included
    FROM pairs
),
derived AS (
    SELECT
        *,
        CASE WHEN is_included THEN base_forwards::DOUBLE / NULLIF(residual_forwards, 0) END AS s_fwd,
        CASE WHEN is_included THEN base_wall_s / NULLIF(residual_wall_s, 0) END AS s_wall,
        CASE WHEN is_included
            THEN base_forwards::DOUBLE / NULLIF(min_residual_forwards, 0) END AS attainable
    FROM flagged
)
SELECT
    {cols cell},
    run_id, cell_id, example_id, excluded_reason, error_type,
    cell_fingerprint,
    quality_metric,
    is_error, is_excluded, is_included,
    CASE WHEN is_included THEN base_quality END AS q_base,
    CASE WHEN is_included THEN stream_quality END AS q_stream,
    CASE WHEN is_included THEN base_forwards END AS f_base,
    CASE WHEN is_included THEN residual_forwards END AS f_residual,
    CASE WHEN is_included THEN residual_wall_s END AS w_residual,
    s_fwd,
    s_wall,
    attainable,
    s_fwd / attainable AS achieved,
    CASE WHEN is_included
        THEN (speculative_forwards + residual_forwards)::DOUBLE / NULLIF(base_forwards, 0)
    END AS overhead,
    CASE WHEN is_included AND draft_tokens_final IS NOT NULL AND accepted_tokens_final IS NOT NULL THEN
        CASE
            WHEN draft_tokens_final = 0 THEN 'no_draft'
            WHEN accepted_tokens_final = 0 THEN 'none'
            WHEN accepted_tokens_final >= draft_tokens_final THEN 'all'
            ELSE 'part'
        END
    END AS kept,
    CASE WHEN is_included THEN base_answer IS DISTINCT FROM stream_answer END AS answer_changed,
    CASE WHEN is_included THEN draft_tokens_final END AS draft_final,
    CASE WHEN is_included THEN accepted_tokens_final END AS accepted_final,
    CASE WHEN is_included THEN residual_forwards = 1 END AS one_forward,
    CASE WHEN is_included THEN residual_forwards <= min_residual_forwards END AS at_floor,
    CASE WHEN is_included THEN stream_is_first_draft END AS first_draft_kept
    {pair_columns}
FROM derived;
