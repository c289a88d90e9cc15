-- How often a step's draft did not change from the previous step's, per cell, over the stream runs
-- of included requests (steps joined to the included pairs rows, as in step_summary.sql).
-- A step is compared when it and the step before it both carry a draft_fingerprint (the hash of
-- the draft token ids the step produced; steps written before it existed are not compared).
--   n_steps_compared         steps 2..n compared with their previous step
--   share_steps_unchanged    share of those whose draft equals the previous step's
--   share_final_unchanged    share of requests whose final answer equals the draft before it
--                            (the last sentence changed nothing), among requests with a comparison
-- Reads step_rows / step_examples (_steps.sql): the previous step is found by an integer join on
-- (pair_idx, step - 1) between steps that both carry a fingerprint.
WITH compared AS (
    SELECT
        s.pair_idx,
        count(*) AS n_compared,
        count(*) FILTER (WHERE s.draft_fingerprint = p.draft_fingerprint) AS n_unchanged,
        max(CASE WHEN s.is_final THEN (s.draft_fingerprint = p.draft_fingerprint)::INTEGER END)
            AS final_unchanged
    FROM step_rows s
    JOIN step_rows p ON p.pair_idx = s.pair_idx AND p.step = s.step - 1
    WHERE s.draft_fingerprint IS NOT NULL AND p.draft_fingerprint IS NOT NULL
    GROUP BY s.pair_idx
),
joined AS (
    SELECT
        {cols cell p},
        coalesce(c.n_compared, 0) AS n_compared,
        coalesce(c.n_unchanged, 0) AS n_unchanged,
        c.final_unchanged
    FROM step_examples e
    JOIN pair_rows_done p ON p.rowid = e.pair_idx
    LEFT JOIN compared c ON c.pair_idx = e.pair_idx
)
SELECT
    {cols cell},
    count(*) AS n_examples,
    sum(n_compared)::BIGINT AS n_steps_compared,
    sum(n_unchanged)::DOUBLE / NULLIF(sum(n_compared), 0) AS share_steps_unchanged,
    avg(final_unchanged::DOUBLE) AS share_final_unchanged
FROM joined
GROUP BY {cols cell}
ORDER BY {order setting}, benchmark;
