-- Per-step view of the stream runs of included requests, per cell (steps of excluded and error
-- rows are left out by joining on the included pairs rows).
--   mean_steps                 segment arrivals per request
--   mean_speculative_forwards  forwards of the non-final steps per request
--   accept_ratio_all / _final  sum(accepted_tokens) / sum(draft_tokens_in) over all / final steps
--   n_residual_mismatch        requests whose final step's forwards differ from the pairs row's
--                              residual_forwards (or that have no final step): should be 0
WITH inc AS (
    SELECT run_id, cell_id, example_id, model, benchmark, acceptance, tau, variant, verifier_mode,
           f_residual
    FROM pair_rows
    WHERE is_included
),
per_example AS (
    SELECT
        i.model, i.benchmark, i.acceptance, i.tau, i.variant, i.verifier_mode, i.example_id,
        any_value(i.f_residual) AS f_residual,
        count(*) AS n_steps,
        coalesce(sum(s.forwards) FILTER (WHERE NOT s.is_final), 0) AS speculative_forwards,
        sum(s.forwards) FILTER (WHERE s.is_final) AS final_forwards,
        sum(s.draft_tokens_in) AS draft_in,
        sum(s.accepted_tokens) AS accepted,
        sum(s.draft_tokens_in) FILTER (WHERE s.is_final) AS draft_in_final,
        sum(s.accepted_tokens) FILTER (WHERE s.is_final) AS accepted_final
    FROM steps s
    JOIN inc i ON s.run_id = i.run_id AND s.cell_id = i.cell_id AND s.example_id = i.example_id
    GROUP BY i.model, i.benchmark, i.acceptance, i.tau, i.variant, i.verifier_mode,
             i.run_id, i.cell_id, i.example_id
)
SELECT
    model, benchmark, acceptance, tau, variant, verifier_mode,
    count(*) AS n_examples,
    sum(n_steps)::BIGINT AS n_steps,
    avg(n_steps) AS mean_steps,
    avg(speculative_forwards) AS mean_speculative_forwards,
    sum(accepted)::DOUBLE / NULLIF(sum(draft_in), 0) AS accept_ratio_all,
    sum(accepted_final)::DOUBLE / NULLIF(sum(draft_in_final), 0) AS accept_ratio_final,
    count(*) FILTER (WHERE final_forwards IS DISTINCT FROM f_residual) AS n_residual_mismatch
FROM per_example
GROUP BY ALL
ORDER BY
    model, benchmark, acceptance, tau NULLS FIRST, variant NULLS FIRST, verifier_mode NULLS FIRST;
