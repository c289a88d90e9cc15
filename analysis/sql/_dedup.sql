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

-- Scorer versions (pairs.scorer_version, after analysis.rescore's newest re-score) are part of a
-- row's identity: where the scored rows counted for one fingerprint carry more than one version (a
-- rescore not yet finished, a scorer changed between two runs), the rows are told apart by
-- `scorer <version>` in settings_tag, so old and new scores land in separately labelled rows,
-- never in one statistic. Rows no scorer saw (errors, exclusions) keep the plain tag.
CREATE OR REPLACE TEMP VIEW pairs_counted AS
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

CREATE OR REPLACE TEMP TABLE scorer_mixed AS
SELECT cell_fingerprint, count(DISTINCT coalesce(scorer_version, 'unversioned')) AS n_scorer_versions
FROM pairs_counted
WHERE base_score_status IS NOT NULL OR stream_score_status IS NOT NULL
GROUP BY cell_fingerprint
HAVING count(DISTINCT coalesce(scorer_version, 'unversioned')) > 1;

CREATE OR REPLACE TEMP VIEW pairs AS
SELECT c.* REPLACE (
    CASE WHEN m.cell_fingerprint IS NULL OR (c.base_score_status IS NULL AND c.stream_score_status IS NULL)
        THEN c.settings_tag
        ELSE concat_ws(', ', c.settings_tag, 'scorer ' || coalesce(c.scorer_version, 'unversioned'))
    END AS settings_tag)
FROM pairs_counted c
LEFT JOIN scorer_mixed m ON c.cell_fingerprint = m.cell_fingerprint;
