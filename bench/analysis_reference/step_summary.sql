-- Per-step view of the stream runs of included requests, per cell (steps of excluded and error
-- rows are left out by joining on the included pairs rows).
--   mean_steps                 segment arrivals per request
--   mean_speculative_forwards  forwards of the non-final steps per request
--   accept_ratio_all / _final  sum(accepted_tokens) / sum(draft_tokens_in) over all / final steps
--   n_residual_mismatch        requests whose final step's forwards differ from the pairs row's
--                              residual_forwards (or that have no final step): should be 0
WITH per_example AS (
    -- aggregate the (large) steps table per request first, then join the narrow result
    SELECT
        run_id, cell_id, example_id,
        count(*) AS n_steps,
        coalesce(sum(forwards) FILTER (WHERE NOT is_final), 0) AS speculative_forwards,
        sum(forwards) FILTER (WHERE is_final) AS final_forwards,
        sum(draft_tokens_in) AS draft_in,
        sum(accepted_tokens) AS accepted,
        sum(draft_tokens_in) FILTER (WHERE is_final) AS draft_in_final,
        sum(accepted_tokens) FILTER (WHERE is_final) AS accepted_final
    FROM steps
    GROUP BY run_id, cell_id, example_id
),
joined AS (
    SELECT p.model, p.benchmark, p.acceptance, p.tau, p.variant, p.verifier_mode, p.settings_tag, p.f_residual, e.*
    FROM per_example e
    JOIN pair_rows p
      ON e.run_id = p.run_id AND e.cell_id = p.cell_id AND e.example_id = p.example_id
    WHERE p.is_included
)
SELECT
    model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag,
    count(*) AS n_examples,
    sum(n_steps)::BIGINT AS n_steps,
    avg(n_steps) AS mean_steps,
    avg(speculative_forwards) AS mean_speculative_forwards,
    sum(accepted)::DOUBLE / NULLIF(sum(draft_in), 0) AS accept_ratio_all,
    sum(accepted_final)::DOUBLE / NULLIF(sum(draft_in_final), 0) AS accept_ratio_final,
    count(*) FILTER (WHERE final_forwards IS DISTINCT FROM f_residual) AS n_residual_mismatch
FROM joined
GROUP BY model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag
ORDER BY
    model, acceptance, tau NULLS FIRST, variant NULLS FIRST, verifier_mode NULLS FIRST, settings_tag NULLS FIRST, benchmark;
