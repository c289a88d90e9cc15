-- Table 3 with paired bootstrap intervals (issue 31). Per (model, benchmark, acceptance, tau,
-- verifier_mode, settings_tag, variant): an adapted variant (variant NOT NULL) against the plain
-- model (variant NULL) with the same other keys (as in adaptation.sql), over the examples included on
-- BOTH sides (pair_rows.is_included), paired by example_id; an example included on one side only is
-- in neither. scope 'benchmark', plus one 'macro' row (benchmark NULL) per setting and variant.
--   n            paired examples (macro: the sum over benchmarks)
-- Every metric M below has five columns:
--   M_plain      the statistic over the paired examples' plain-model rows
--   M_adapted    the same over their adapted rows
--   M_diff       adapted - plain. For the means and the two per-example shares (kept_whole,
--                one_forward) it is the mean of the per-example differences: the same number up to
--                rounding, and exact where the difference is (+1 residual forward everywhere gives 1)
--   M_lo, M_hi   95 % percentile bootstrap interval of M_diff: 1000 resamples of the paired examples,
--                each draw taking one example's plain AND adapted values; draw k of resample b is
--                example number hash('<cell keys>|b|k') % n (numbered by example_id), so the interval
--                is the same on every run (divergence.sql says why a hash of text). In a resample
--                every statistic is computed as on the data (a ratio of the resample's sums, its median)
-- Metrics (the pair_rows column they read):
--   preserved_share          sum(accepted_final) / sum(draft_final): a ratio of sums, not a mean of ratios
--   kept_whole_share         share with kept = 'all' (the final verify kept the whole draft)
--   one_forward_share        share with one_forward (residual_forwards = 1)
--   mean_residual_forwards   mean f_residual
--   mean_residual_wall_s     mean w_residual (residual_wall_s, seconds)
--   median_speedup_forwards  median s_fwd (quantile_cont 0.5, as in cells.sql)
--   median_speedup_wall      median s_wall
--   stream_quality_pct       100 * mean q_stream (percent; the diff in percentage points)
-- Macro row: M_plain, M_adapted and M_diff are the means over the benchmarks of each benchmark's
-- statistic (a benchmark whose statistic is NULL is skipped); its resample b is the mean of the
-- benchmarks' resamples b, each benchmark resampled on its own (stratified: every benchmark keeps its
-- n and its weight). The point statistics are "resample" b = -1, whose draw k is example k.
WITH side AS (
    SELECT
        {cols cell}, example_id,
        accepted_final, draft_final, (kept = 'all')::DOUBLE AS kept_whole, one_forward::DOUBLE AS one_fwd,
        f_residual, w_residual, s_fwd, s_wall, q_stream
    FROM pair_rows
    WHERE is_included
),
paired AS MATERIALIZED (
    SELECT
        {cols cell a},
        dense_rank() OVER (ORDER BY {cols cell a}) AS g,
        row_number() OVER (PARTITION BY {cols cell a} ORDER BY a.example_id) - 1 AS i,
        count(*) OVER (PARTITION BY {cols cell a}) AS n,
        p.accepted_final AS acc_p, a.accepted_final AS acc_a,
        p.draft_final AS draft_p, a.draft_final AS draft_a,
        p.kept_whole AS kept_p, a.kept_whole AS kept_a,
        p.one_fwd AS one_p, a.one_fwd AS one_a,
        p.f_residual AS fwd_p, a.f_residual AS fwd_a,
        p.w_residual AS wall_p, a.w_residual AS wall_a,
        p.s_fwd AS sfwd_p, a.s_fwd AS sfwd_a,
        p.s_wall AS swall_p, a.s_wall AS swall_a,
        p.q_stream AS q_p, a.q_stream AS q_a
    FROM side a
    JOIN side p
      ON p.variant IS NULL AND a.variant IS NOT NULL
     AND {match cell -variant a p}  -- the plain model's row of the same setting and example
     AND a.example_id = p.example_id
),
cell_keys AS (
    SELECT DISTINCT g, n, {cols cell}, concat_ws('|', {cols cell}) AS seed
    FROM paired
),
draws AS (
    SELECT g, -1 AS b, i FROM cell_keys, range(n) k(i)
    UNION ALL
    -- the modulus as UBIGINT: hash() is UBIGINT, and UBIGINT % BIGINT is HUGEINT arithmetic, 10x slower
    SELECT g, b, (hash(concat_ws('|', seed, b, k)) % n::UBIGINT)::BIGINT AS i
    FROM cell_keys, range(1000) r(b), range(n) k(k)
),
resampled AS (
    SELECT
        d.g, d.b,
        sum(acc_p)::DOUBLE / NULLIF(sum(draft_p), 0) AS preserved_share_plain,
        sum(acc_a)::DOUBLE / NULLIF(sum(draft_a), 0) AS preserved_share_adapted,
        preserved_share_adapted - preserved_share_plain AS preserved_share_diff,
        avg(kept_p) AS kept_whole_share_plain,
        avg(kept_a) AS kept_whole_share_adapted,
        avg(kept_a - kept_p) AS kept_whole_share_diff,
        avg(one_p) AS one_forward_share_plain,
        avg(one_a) AS one_forward_share_adapted,
        avg(one_a - one_p) AS one_forward_share_diff,
        avg(fwd_p) AS mean_residual_forwards_plain,
        avg(fwd_a) AS mean_residual_forwards_adapted,
        avg(fwd_a - fwd_p) AS mean_residual_forwards_diff,
        avg(wall_p) AS mean_residual_wall_s_plain,
        avg(wall_a) AS mean_residual_wall_s_adapted,
        avg(wall_a - wall_p) AS mean_residual_wall_s_diff,
        quantile_cont(sfwd_p, 0.5) AS median_speedup_forwards_plain,
        quantile_cont(sfwd_a, 0.5) AS median_speedup_forwards_adapted,
        median_speedup_forwards_adapted - median_speedup_forwards_plain AS median_speedup_forwards_diff,
        quantile_cont(swall_p, 0.5) AS median_speedup_wall_plain,
        quantile_cont(swall_a, 0.5) AS median_speedup_wall_adapted,
        median_speedup_wall_adapted - median_speedup_wall_plain AS median_speedup_wall_diff,
        100 * avg(q_p) AS stream_quality_pct_plain,
        100 * avg(q_a) AS stream_quality_pct_adapted,
        100 * avg(q_a - q_p) AS stream_quality_pct_diff
    FROM draws d
    JOIN paired p ON p.g = d.g AND p.i = d.i
    GROUP BY d.g, d.b
),
per_benchmark AS (
    SELECT c.* EXCLUDE (g, seed), 'benchmark' AS scope, r.* EXCLUDE (g)
    FROM resampled r
    JOIN cell_keys c ON c.g = r.g
),
macro AS (
    SELECT
        {cols setting}, NULL::VARCHAR AS benchmark,  -- UNION ALL BY NAME: the column order is the first side's
        'macro' AS scope, b, sum(n)::BIGINT AS n,
        avg(COLUMNS('_(plain|adapted|diff)$'))
    FROM per_benchmark
    GROUP BY {cols setting}, b
),
summarised AS (
    SELECT
        {cols cell}, scope,
        any_value(n) AS n,
        any_value(COLUMNS('_(plain|adapted|diff)$')) FILTER (WHERE b < 0),
        quantile_cont(COLUMNS('^(\w+)_diff$'), 0.025) FILTER (WHERE b >= 0) AS '\1_lo',
        quantile_cont(COLUMNS('^(\w+)_diff$'), 0.975) FILTER (WHERE b >= 0) AS '\1_hi'
    FROM (SELECT * FROM per_benchmark UNION ALL BY NAME SELECT * FROM macro)
    GROUP BY {cols cell}, scope
)
SELECT
    {cols cell}, scope, n,
    COLUMNS('^preserved_share_'), COLUMNS('^kept_whole_share_'), COLUMNS('^one_forward_share_'),
    COLUMNS('^mean_residual_forwards_'), COLUMNS('^mean_residual_wall_s_'),
    COLUMNS('^median_speedup_forwards_'), COLUMNS('^median_speedup_wall_'), COLUMNS('^stream_quality_pct_')
FROM summarised
ORDER BY
    model, variant, {order setting -model -variant},  -- each variant's rows together
    CASE scope WHEN 'benchmark' THEN 0 ELSE 1 END, benchmark;
