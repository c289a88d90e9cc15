-- Distribution of the per-example outcome (paper §6), per cell (scope 'benchmark'), the macro
-- average over a setting's benchmarks (scope 'macro') and pooled over its requests (scope 'pooled').
-- Shares are fractions in [0, 1] of the included requests whose statistic is defined:
--   share_below_*      speedup in forwards below 1x / 0.9x / 0.8x (share_below_1x_wall: wall clock)
--   median_speedup_losers  median forwards speedup among requests below 1x (NULL if none lose)
--   share_keep_*       outcome at the final update: none / all / part of a non-empty draft kept,
--                      no_draft: the draft entering the final verify was empty (draft_tokens_final = 0)
--   share_first_draft  the stream answer equals the first step's draft, token for token (stale: paper
--                      §6.5's "the same nine-token stub, written from the opening sentence and never revised")
--   share_one_forward  residual_forwards = 1; share_at_floor: residual_forwards <= min_residual_forwards
--   median_attainable  median of base_forwards / min_residual_forwards
--   median_achieved    median of speedup_forwards / attainable
--   *_overhead         (speculative_forwards + residual_forwards) / base_forwards
--   share_forwards_removed  1 - sum(residual_forwards) / sum(base_forwards)
WITH per_group AS (
    SELECT
        {cols cell},
        CASE WHEN GROUPING(benchmark) = 1 THEN 'pooled' ELSE 'benchmark' END AS scope,
        count(*) FILTER (WHERE is_included) AS n_included,
        avg((s_fwd < 1)::DOUBLE) AS share_below_1x,
        avg((s_fwd < 0.9)::DOUBLE) AS share_below_0_9x,
        avg((s_fwd < 0.8)::DOUBLE) AS share_below_0_8x,
        avg((s_wall < 1)::DOUBLE) AS share_below_1x_wall,
        quantile_cont(s_fwd, 0.5) FILTER (WHERE s_fwd < 1) AS median_speedup_losers,
        avg((kept = 'none')::DOUBLE) AS share_keep_none,
        avg((kept = 'all')::DOUBLE) AS share_keep_all,
        avg((kept = 'part')::DOUBLE) AS share_keep_part,
        avg((kept = 'no_draft')::DOUBLE) AS share_no_draft,
        avg(first_draft_kept::DOUBLE) AS share_first_draft,
        avg(one_forward::DOUBLE) AS share_one_forward,
        avg(at_floor::DOUBLE) AS share_at_floor,
        quantile_cont(attainable, 0.5) AS median_attainable,
        quantile_cont(achieved, 0.5) AS median_achieved,
        avg(overhead) AS mean_overhead,
        quantile_cont(overhead, 0.5) AS median_overhead,
        1 - sum(f_residual)::DOUBLE / NULLIF(sum(f_base), 0) AS share_forwards_removed
    FROM pair_rows
    GROUP BY GROUPING SETS (
        ({cols cell}),
        ({cols setting})
    )
),
macro AS (
    SELECT
        {cols setting}, NULL::VARCHAR AS benchmark,  -- UNION ALL BY NAME: the column order is the first side's
        'macro' AS scope,
        sum(n_included)::BIGINT AS n_included,
        avg(share_below_1x) AS share_below_1x,
        avg(share_below_0_9x) AS share_below_0_9x,
        avg(share_below_0_8x) AS share_below_0_8x,
        avg(share_below_1x_wall) AS share_below_1x_wall,
        avg(median_speedup_losers) AS median_speedup_losers,
        avg(share_keep_none) AS share_keep_none,
        avg(share_keep_all) AS share_keep_all,
        avg(share_keep_part) AS share_keep_part,
        avg(share_no_draft) AS share_no_draft,
        avg(share_first_draft) AS share_first_draft,
        avg(share_one_forward) AS share_one_forward,
        avg(share_at_floor) AS share_at_floor,
        avg(median_attainable) AS median_attainable,
        avg(median_achieved) AS median_achieved,
        avg(mean_overhead) AS mean_overhead,
        avg(median_overhead) AS median_overhead,
        avg(share_forwards_removed) AS share_forwards_removed
    FROM per_group
    WHERE scope = 'benchmark'
    GROUP BY {cols setting}
)
SELECT * FROM (SELECT * FROM per_group UNION ALL BY NAME SELECT * FROM macro)
ORDER BY
    {order setting},
    CASE scope WHEN 'benchmark' THEN 0 WHEN 'macro' THEN 1 ELSE 2 END, benchmark;
