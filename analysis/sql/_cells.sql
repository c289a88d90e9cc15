-- Every pairs row with its cell fingerprint (the runner executes this file first, reads the
-- fingerprints, builds `cell_tags` from them, then runs _dedup.sql and _views.sql). Rows written
-- before the fingerprint existed get 'cell:<cell_id>', so they stay apart from everything else.
-- A row with neither a fingerprint nor a cell id, or without an example id, belongs to no
-- (cell, example): it is left out here, and the runner counts and reports such rows
-- (`pairs_null_keys`), so none is dropped without a word.
CREATE OR REPLACE TEMP VIEW pairs_keyed AS
SELECT * REPLACE (coalesce(cell_fingerprint, 'cell:' || cell_id) AS cell_fingerprint)
FROM pairs_files
WHERE coalesce(cell_fingerprint, cell_id) IS NOT NULL AND example_id IS NOT NULL;

CREATE OR REPLACE TEMP VIEW pairs_null_keys AS
SELECT
    count(*) FILTER (WHERE coalesce(cell_fingerprint, cell_id) IS NULL) AS no_cell,
    count(*) FILTER (WHERE example_id IS NULL) AS no_example,
    count(*) FILTER (WHERE coalesce(cell_fingerprint, cell_id) IS NULL OR example_id IS NULL) AS dropped
FROM pairs_files;
