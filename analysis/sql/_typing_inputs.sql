-- The recorded steps of included requests, with what the typing analysis needs from their pairs row
-- (analysis/typing_table.py reads this, evaluates each example under every typing rate and policy, and
-- registers the result as typing_examples for typing.sql). Ordered so that one example's steps are
-- consecutive and in step order.
--   live_policy   NULL for the replay (every prefix, back to back); set for cells run live
--   arrived_text  the request text each step added (analysis/population.py finds paragraph breaks in it)
--   first_change_char, chars_deleted, correction_keys  corrections cells (docs/typists.md): where a step's
--                 text first differs from the last one's, what it deleted, the keystrokes spent on
--                 corrections (NULL elsewhere)
SELECT
    {cols cell p}, p.device,
    p.run_id, p.cell_id, p.example_id, p.live_policy, p.live_chars_per_s,
    p.base_wall_s, p.base_forwards, p.base_tokens_fed,
    s.step, s.is_final, s.prefix_chars,
    coalesce(s.pasted_chars, 0) AS pasted_chars,
    coalesce(s.sentence_ends, 0) AS sentence_ends,
    s.wall_s, s.forwards, s.tokens_fed, s.draft_tokens_in, s.accepted_tokens, s.generated_tokens,
    s.arrival_s, s.start_s, s.request_tokens, s.cached_tokens, s.live_every_k, s.arrived_text,
    s.first_change_char, s.chars_deleted, s.correction_keys
FROM steps s
JOIN pairs p ON s.run_id = p.run_id AND s.cell_id = p.cell_id AND s.example_id = p.example_id
WHERE p.error_type IS NULL AND p.excluded_reason IS NULL
ORDER BY p.model, p.device, p.run_id, p.cell_id, p.example_id, s.step;
