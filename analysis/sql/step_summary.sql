-- Per-step view of the stream runs of included requests, per cell (steps of excluded and error
-- rows are left out by joining on the included pairs rows).
--   mean_steps                 segment arrivals per request
--   mean_speculative_forwards  forwards of the non-final steps per request
--   accept_ratio_all / _final  sum(accepted_tokens) / sum(draft_tokens_in) over all / final steps
--   n_residual_mismatch        requests whose final step's forwards differ from the pairs row's
--                              residual_forwards (or that have no final step): should be 0
-- Reads step_examples (_steps.sql: the steps aggregated per included request, keyed by pair_idx).
WITH joined AS (
    SELECT {cols cell p}, p.f_residual, e.*
    FROM step_examples e
    JOIN pair_rows_done p ON p.rowid = e.pair_idx
)
SELECT
    {cols cell},
    count(*) AS n_examples,
    sum(n_steps)::BIGINT AS n_steps,
    avg(n_steps) AS mean_steps,
    avg(speculative_forwards) AS mean_speculative_forwards,
    sum(accepted)::DOUBLE / NULLIF(sum(draft_in), 0) AS accept_ratio_all,
    sum(accepted_final)::DOUBLE / NULLIF(sum(draft_in_final), 0) AS accept_ratio_final,
    count(*) FILTER (WHERE final_forwards IS DISTINCT FROM f_residual) AS n_residual_mismatch
FROM joined
GROUP BY {cols cell}
ORDER BY
    {order setting}, benchmark;
