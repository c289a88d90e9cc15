-- `pairs`, what every table reads: only the fingerprints kept in the runner's `cell_tags` table
-- (all of them, or with --latest the most recent run's per cell name), each tagged with the
-- settings that tell it apart from the other fingerprints of its cell name (NULL when it has
-- none), and each (fingerprint, example) ONCE: the row of the most recent run (run ids sort by
-- start time), so two runs into one directory never count an example twice.
CREATE OR REPLACE TEMP VIEW pairs AS
SELECT p.*, t.settings_tag
FROM pairs_keyed p
JOIN cell_tags t ON p.cell_fingerprint = t.cell_fingerprint
WHERE t.kept
QUALIFY row_number() OVER (
    PARTITION BY p.cell_fingerprint, p.example_id ORDER BY p.run_id DESC, p.shard_id DESC
) = 1;
