-- Every pairs row with its cell fingerprint (the runner executes this file first, reads the
-- fingerprints, builds `cell_tags` from them, then runs _dedup.sql and _views.sql). Rows written
-- before the fingerprint existed get 'cell:<cell_id>', so they stay apart from everything else.
CREATE OR REPLACE TEMP VIEW pairs_keyed AS
SELECT * REPLACE (coalesce(cell_fingerprint, 'cell:' || cell_id) AS cell_fingerprint)
FROM pairs_files;
