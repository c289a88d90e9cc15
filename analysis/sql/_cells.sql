-- Every pairs row with its cell fingerprint (the runner executes this file first, reads the
-- fingerprints, builds `cell_tags` from them, then runs _dedup.sql and _views.sql). Rows written
-- before the fingerprint existed get 'cell:<cell_id>', so they stay apart from everything else.
-- A row with neither a fingerprint nor a cell id, or without an example id, belongs to no
-- (cell, example): it is left out here, and the runner counts and reports such rows
-- (`pairs_null_keys`), so none is dropped without a word.
-- A row re-scored by `python -m analysis.rescore` (a `scores` row with its run, shard and example)
-- carries the newest re-score's qualities, statuses, sandbox and scorer version instead of its own;
-- `rescore_id` names that re-score (NULL: the grid's own score) and `decode_*` keep the grid's.
CREATE OR REPLACE TEMP VIEW score_latest AS
SELECT * FROM scores
QUALIFY row_number() OVER (PARTITION BY run_id, shard_id, example_id ORDER BY rescore_id DESC) = 1;

CREATE OR REPLACE TEMP VIEW pairs_keyed AS
SELECT p.* REPLACE (
           coalesce(p.cell_fingerprint, 'cell:' || p.cell_id) AS cell_fingerprint,
           CASE WHEN s.rescore_id IS NULL THEN p.base_quality ELSE s.base_quality END AS base_quality,
           CASE WHEN s.rescore_id IS NULL THEN p.stream_quality ELSE s.stream_quality END AS stream_quality,
           CASE WHEN s.rescore_id IS NULL THEN p.base_score_status ELSE s.base_score_status END AS base_score_status,
           CASE WHEN s.rescore_id IS NULL THEN p.stream_score_status ELSE s.stream_score_status END
               AS stream_score_status,
           CASE WHEN s.rescore_id IS NULL THEN p.sandbox_backend ELSE s.sandbox_backend END AS sandbox_backend,
           CASE WHEN s.rescore_id IS NULL THEN p.sandbox_view ELSE s.sandbox_view END AS sandbox_view,
           CASE WHEN s.rescore_id IS NULL THEN p.scorer_version ELSE s.scorer_version END AS scorer_version
       ),
       s.rescore_id,
       p.scorer_version AS decode_scorer_version,
       p.base_quality AS decode_base_quality,
       p.stream_quality AS decode_stream_quality
FROM pairs_files p
LEFT JOIN score_latest s
  ON p.run_id = s.run_id AND p.shard_id = s.shard_id AND p.example_id = s.example_id
WHERE coalesce(p.cell_fingerprint, p.cell_id) IS NOT NULL AND p.example_id IS NOT NULL;

CREATE OR REPLACE TEMP VIEW pairs_null_keys AS
SELECT
    count(*) FILTER (WHERE coalesce(cell_fingerprint, cell_id) IS NULL) AS no_cell,
    count(*) FILTER (WHERE example_id IS NULL) AS no_example,
    count(*) FILTER (WHERE coalesce(cell_fingerprint, cell_id) IS NULL OR example_id IS NULL) AS dropped
FROM pairs_files;
