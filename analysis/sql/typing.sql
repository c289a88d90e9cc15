-- Wait after the last keystroke per cell, typing rate and drafting policy (docs/timing.md).
-- Reads typing_examples (one row per included example × rate × policy, built by analysis/typing_table.py).
--   source            post_hoc (recorded replay steps under the policy) | live (run on the real clock)
--   median/p90_wait_s end of the last step − arrival of the last segment
--   median_base_wait_s the base run's wall clock (submit, then decode)
--   keeps_up_share    share of examples whose every speculative step ended before the next arrival
--   median_backlog_s  start of the last step − arrival of the last segment (work still queued)
--   modelled_share    share of examples with at least one step costed by the fitted cost model
SELECT
    {cols cell},
    chars_per_s AS rate, policy, source,
    count(*) AS n,
    quantile_cont(wait_s, 0.5) AS median_wait_s,
    quantile_cont(wait_s, 0.9) AS p90_wait_s,
    quantile_cont(base_wait_s, 0.5) AS median_base_wait_s,
    avg(keeps_up::DOUBLE) AS keeps_up_share,
    quantile_cont(backlog_s, 0.5) AS median_backlog_s,
    avg(skipped::DOUBLE) AS mean_skipped,
    avg(modelled::DOUBLE) AS modelled_share
FROM typing_examples
WHERE wait_s IS NOT NULL
GROUP BY ALL
ORDER BY
    {order setting},
    benchmark,
    source, policy, rate;
