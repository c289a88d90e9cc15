-- Divergence of greedy stream answers from their base answers (issue 27, docs/numerics.md), per
-- (model, dtype, benchmark, tie guard, settings tag), over included greedy pairs:
--   equality_rate        share of pairs whose stream tokens equal the base tokens (first_diff_token NULL)
--   margin_p50/p90       base run's top-2 margin at the first difference, in dtype spacings (diverged pairs)
--   near_tie_le1/le4     share of diverged pairs whose base margin there is <= 1 / <= 4 spacings
--   stream_margin_p50    the final step's margin at that position (verify row or regeneration)
--   draft_branch_share   share of diverged pairs whose stream token there was an accepted draft token
--   draft_after_mean     mean final stream tokens after the difference that came from the draft
--   dq_mean, dq_lo/dq_hi mean (stream - base) quality over diverged pairs; 95 % percentile bootstrap
--                        (1000 resamples; each draw's index is a hash of the text 'group|resample|draw',
--                        so the interval is the same on every run; DuckDB's multi-argument hash of
--                        small integers mixes too little and widened the interval by ~40 %)
--   dq_all               mean (stream - base) quality over all pairs of the group (the study's "loss")
--   accepted_mean, residual_fwd_mean: what the guard costs (compare a guard's row with plain greedy's)
-- dtype: the actor's numerics record, else the cell's model.dtype setting.
WITH g AS (
    SELECT
        model, benchmark, tie_guard, settings_tag, example_id,
        coalesce(numerics ->> '$.dtype', cell_settings ->> '$."model.dtype"') AS dtype,
        first_diff_token, base_margin_at_diff, stream_margin_at_diff, diff_from_draft,
        draft_tokens_after_diff, accepted_tokens_final, residual_forwards,
        stream_quality - base_quality AS dq
    FROM pairs
    WHERE acceptance = 'greedy' AND excluded_reason IS NULL AND error_type IS NULL
),
diverged AS (
    SELECT *,
           row_number() OVER (PARTITION BY model, dtype, benchmark, tie_guard, settings_tag
                              ORDER BY example_id) - 1 AS i,
           count(*) OVER (PARTITION BY model, dtype, benchmark, tie_guard, settings_tag) AS n
    FROM g
    WHERE first_diff_token IS NOT NULL AND dq IS NOT NULL
),
sizes AS (
    SELECT DISTINCT model, dtype, benchmark, tie_guard, settings_tag, n FROM diverged
),
draws AS (
    SELECT s.*, b, unnest(range(s.n)) AS k
    FROM sizes s, range(1000) r(b)
),
resampled AS (
    SELECT w.model, w.dtype, w.benchmark, w.tie_guard, w.settings_tag, w.b, avg(d.dq) AS mean_dq
    FROM draws w
    JOIN diverged d
      ON d.model = w.model AND d.dtype IS NOT DISTINCT FROM w.dtype AND d.benchmark = w.benchmark
     AND d.tie_guard IS NOT DISTINCT FROM w.tie_guard AND d.settings_tag IS NOT DISTINCT FROM w.settings_tag
     AND d.i = hash(concat_ws('|', w.model, w.dtype, w.benchmark, w.tie_guard, w.settings_tag, w.b, w.k)) % w.n
    GROUP BY ALL
),
boot AS (
    SELECT model, dtype, benchmark, tie_guard, settings_tag,
           quantile_cont(mean_dq, 0.025) AS dq_lo, quantile_cont(mean_dq, 0.975) AS dq_hi
    FROM resampled
    GROUP BY ALL
),
stats AS (
    SELECT
        model, dtype, benchmark, tie_guard, settings_tag,
        count(*) AS n,
        count(*) FILTER (WHERE first_diff_token IS NULL) AS equal,
        avg((first_diff_token IS NULL)::INT) AS equality_rate,
        quantile_cont(base_margin_at_diff, 0.5) AS margin_p50,
        quantile_cont(base_margin_at_diff, 0.9) AS margin_p90,
        avg((base_margin_at_diff <= 1)::INT) FILTER (WHERE first_diff_token IS NOT NULL) AS near_tie_le1,
        avg((base_margin_at_diff <= 4)::INT) FILTER (WHERE first_diff_token IS NOT NULL) AS near_tie_le4,
        quantile_cont(stream_margin_at_diff, 0.5) AS stream_margin_p50,
        avg(diff_from_draft::INT) FILTER (WHERE first_diff_token IS NOT NULL) AS draft_branch_share,
        avg(draft_tokens_after_diff) FILTER (WHERE first_diff_token IS NOT NULL) AS draft_after_mean,
        avg(dq) FILTER (WHERE first_diff_token IS NOT NULL) AS dq_mean,
        avg(dq) AS dq_all,
        avg(accepted_tokens_final) AS accepted_mean,
        avg(residual_forwards) AS residual_fwd_mean
    FROM g
    GROUP BY ALL
)
SELECT s.model, s.dtype, s.benchmark, s.tie_guard, s.settings_tag, s.n, s.equal, s.equality_rate,
       s.n - s.equal AS diverged, s.margin_p50, s.margin_p90, s.near_tie_le1, s.near_tie_le4,
       s.stream_margin_p50, s.draft_branch_share, s.draft_after_mean,
       s.dq_mean, b.dq_lo, b.dq_hi, s.dq_all, s.accepted_mean, s.residual_fwd_mean
FROM stats s
LEFT JOIN boot b
  ON b.model = s.model AND b.dtype IS NOT DISTINCT FROM s.dtype AND b.benchmark = s.benchmark
 AND b.tie_guard IS NOT DISTINCT FROM s.tie_guard AND b.settings_tag IS NOT DISTINCT FROM s.settings_tag
ORDER BY s.model, s.dtype, s.benchmark, s.tie_guard NULLS FIRST, s.settings_tag NULLS FIRST
