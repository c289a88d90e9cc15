-- The steps of included requests, built once per connection for step_summary.sql and
-- draft_stability.sql (the runner executes this file before the first of them). Each steps row is
-- joined ONCE to its included pairs row (on run_id, cell_id, example_id) and carries that row's
-- integer position `pair_idx` (the rowid of the runner's materialised pair_rows_done), so the
-- per-request aggregates and the previous-step lookup group and join on one integer instead of
-- three strings. Same rows as joining the per-request aggregates to the included pairs rows.
--   step_rows      one row per (included pairs row, steps row)
--   step_examples  one row per included pairs row with at least one step: its per-request sums
CREATE TEMP TABLE IF NOT EXISTS step_rows AS
SELECT
    p.rowid AS pair_idx,
    s.step, s.is_final, s.forwards, s.draft_tokens_in, s.accepted_tokens, s.draft_fingerprint
FROM steps s
JOIN pair_rows_done p
  ON s.run_id = p.run_id AND s.cell_id = p.cell_id AND s.example_id = p.example_id
WHERE p.is_included;

CREATE TEMP TABLE IF NOT EXISTS step_examples AS
SELECT
    pair_idx,
    count(*) AS n_steps,
    coalesce(sum(forwards) FILTER (WHERE NOT is_final), 0) AS speculative_forwards,
    sum(forwards) FILTER (WHERE is_final) AS final_forwards,
    sum(draft_tokens_in) AS draft_in,
    sum(accepted_tokens) AS accepted,
    sum(draft_tokens_in) FILTER (WHERE is_final) AS draft_in_final,
    sum(accepted_tokens) FILTER (WHERE is_final) AS accepted_final
FROM step_rows
GROUP BY pair_idx;
