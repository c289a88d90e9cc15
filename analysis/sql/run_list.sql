-- The grid runs whose rows are in this results directory; status: finished, interrupted (with the
-- signal), aborted, failed, or running (a running run whose results directory is not locked was killed).
SELECT
    run_id, grid, code_version, host, started_at, finished_at,
    CASE WHEN stop_signal IS NOT NULL THEN status || ' (' || stop_signal || ')' ELSE status END AS status,
    shards_total, shards_done, shards_skipped, schema_version, forwards_executed
FROM runs
ORDER BY started_at, run_id;
