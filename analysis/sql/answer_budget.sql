-- Base answers ending before their cell's answer budget (so with EOS, or a stop string: an autoregressive
-- answer stops early only there), over the `budget_pairs` view (the pairs files that have the four columns),
-- counted per pairs row (each cell repeats its example's base run) for the models $models and benchmarks
-- $benchmarks the grid names. A row without a base answer length (an error row) or without settings is not
-- counted. workflows/full_grid.py prints it after a run (docs/experiments.md: a budget every answer fills
-- makes the speedups describe the budget, not streaming).
--   early  rows whose base_answer_tokens < the max_new_tokens recorded in their cell_settings
--   n      rows counted
SELECT
    count(*) FILTER (WHERE base_answer_tokens < CAST(cell_settings ->> '$.max_new_tokens' AS BIGINT)) AS early,
    count(*) AS n
FROM budget_pairs
WHERE list_contains($models, model) AND list_contains($benchmarks, benchmark)
    AND base_answer_tokens IS NOT NULL AND cell_settings IS NOT NULL;
