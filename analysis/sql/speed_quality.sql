-- Speed against correctness: included requests cross-tabulated by speed (speedup in forwards
-- > 1 'faster', < 1 'slower', = 1 'same') and answer (stream answer differs from the base answer:
-- 'changed', else 'unchanged'), per cell (scope 'benchmark') and pooled over a setting's
-- benchmarks ('pooled'). Only combinations that occur have a row.
--   share               n / included requests of the cell (or setting) with a speedup
--   n_quality_changed   stream quality differs from base quality (both scored); _up / _down by sign
--   mean_quality_delta  mean of stream_quality - base_quality
WITH classed AS (
    SELECT
        {cols cell},
        CASE WHEN s_fwd > 1 THEN 'faster' WHEN s_fwd < 1 THEN 'slower' ELSE 'same' END AS speed,
        CASE WHEN answer_changed THEN 'changed' ELSE 'unchanged' END AS answer,
        q_base, q_stream
    FROM pair_rows
    WHERE is_included AND s_fwd IS NOT NULL
),
counted AS (
    SELECT
        {cols cell}, speed, answer,
        CASE WHEN GROUPING(benchmark) = 1 THEN 'pooled' ELSE 'benchmark' END AS scope,
        count(*) AS n,
        count(*) FILTER (WHERE q_stream <> q_base) AS n_quality_changed,
        count(*) FILTER (WHERE q_stream > q_base) AS n_quality_up,
        count(*) FILTER (WHERE q_stream < q_base) AS n_quality_down,
        avg(q_stream - q_base) AS mean_quality_delta
    FROM classed
    GROUP BY GROUPING SETS (
        ({cols cell}, speed, answer),
        ({cols setting}, speed, answer)
    )
)
SELECT
    *,
    n::DOUBLE / sum(n) OVER (
        PARTITION BY {cols cell}, scope
    ) AS share
FROM counted
ORDER BY
    {order setting},
    CASE scope WHEN 'benchmark' THEN 0 ELSE 1 END, benchmark,
    CASE speed WHEN 'faster' THEN 0 WHEN 'same' THEN 1 ELSE 2 END, answer;
