-- How often a step's draft did not change from the previous step's, per cell, over the stream runs
-- of included requests (steps joined to the included pairs rows, as in step_summary.sql).
-- A step is compared when it and the step before it both carry a draft_fingerprint (the hash of
-- the draft token ids the step produced; steps written before it existed are not compared).
--   n_steps_compared         steps 2..n compared with their previous step
--   share_steps_unchanged    share of those whose draft equals the previous step's
--   share_final_unchanged    share of requests whose final answer equals the draft before it
--                            (the last sentence changed nothing), among requests with a comparison
WITH ordered AS (
    -- each step with the previous step's fingerprint (a hash join: cheaper than a window's sort)
    SELECT
        s.run_id, s.cell_id, s.example_id, s.step, s.is_final, s.draft_fingerprint,
        p.draft_fingerprint AS previous
    FROM steps s
    LEFT JOIN steps p
      ON p.run_id = s.run_id AND p.cell_id = s.cell_id AND p.example_id = s.example_id
     AND p.step = s.step - 1
),
per_example AS (
    SELECT
        run_id, cell_id, example_id,
        count(*) FILTER (WHERE previous IS NOT NULL AND draft_fingerprint IS NOT NULL) AS n_compared,
        count(*) FILTER (WHERE previous IS NOT NULL AND draft_fingerprint = previous) AS n_unchanged,
        max(CASE WHEN is_final AND previous IS NOT NULL AND draft_fingerprint IS NOT NULL
            THEN (draft_fingerprint = previous)::INTEGER END) AS final_unchanged
    FROM ordered
    GROUP BY run_id, cell_id, example_id
),
joined AS (
    SELECT p.model, p.benchmark, p.acceptance, p.tau, p.variant, p.verifier_mode, p.settings_tag, e.*
    FROM per_example e
    JOIN pair_rows p
      ON e.run_id = p.run_id AND e.cell_id = p.cell_id AND e.example_id = p.example_id
    WHERE p.is_included
)
SELECT
    model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag,
    count(*) AS n_examples,
    sum(n_compared)::BIGINT AS n_steps_compared,
    sum(n_unchanged)::DOUBLE / NULLIF(sum(n_compared), 0) AS share_steps_unchanged,
    avg(final_unchanged::DOUBLE) AS share_final_unchanged
FROM joined
GROUP BY model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag
ORDER BY model, acceptance, tau NULLS FIRST, variant NULLS FIRST, verifier_mode NULLS FIRST, settings_tag NULLS FIRST, benchmark;
