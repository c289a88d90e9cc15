-- `pairs`, what every table reads: only the fingerprints kept in the runner's `cell_tags` table
-- (all of them, or with --latest the most recent run's per cell name), each tagged with the
-- settings that tell it apart from the other fingerprints of its cell name (NULL when it has
-- none), and each (fingerprint, example) ONCE: the row of the most recent run (run ids sort by
-- start time), so two runs into one directory never count an example twice.
-- Only the keys written more than once (`pair_dups`, usually none) go through the ranking window;
-- every other row passes straight through: the same rows as a window over all pairs, without
-- sorting 10^6 wide rows. fingerprints.sql counts the duplicates from it.
CREATE OR REPLACE TEMP TABLE pair_dups AS
SELECT cell_fingerprint, example_id, count(*) AS n_rows
FROM pairs_keyed
GROUP BY cell_fingerprint, example_id
HAVING count(*) > 1;

CREATE OR REPLACE TEMP VIEW pairs AS
WITH kept AS (
    SELECT p.*, t.settings_tag
    FROM pairs_keyed p
    JOIN cell_tags t ON p.cell_fingerprint = t.cell_fingerprint
    WHERE t.kept
)
SELECT * FROM kept k
ANTI JOIN pair_dups d
  ON k.cell_fingerprint IS NOT DISTINCT FROM d.cell_fingerprint AND k.example_id = d.example_id
UNION ALL
SELECT * FROM (
    SELECT k.* FROM kept k
    SEMI JOIN pair_dups d
      ON k.cell_fingerprint IS NOT DISTINCT FROM d.cell_fingerprint AND k.example_id = d.example_id
)
QUALIFY row_number() OVER (
    PARTITION BY cell_fingerprint, example_id ORDER BY run_id DESC, shard_id DESC
) = 1;
