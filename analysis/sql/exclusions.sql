-- Rows kept out of every statistic, counted per cell and reason.
-- kind 'error' (error_type set; its reason is the error type) or 'excluded' (excluded_reason set).
SELECT
    {cols cell},
    CASE WHEN is_error THEN 'error' ELSE 'excluded' END AS kind,
    CASE WHEN is_error THEN error_type ELSE excluded_reason END AS reason,
    count(*) AS n
FROM pair_rows
WHERE NOT is_included
GROUP BY ALL
ORDER BY
    {order setting}, benchmark,
    kind, reason;
