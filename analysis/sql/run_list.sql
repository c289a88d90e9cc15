-- The grid runs whose rows are in this results directory.
SELECT
    run_id, grid, code_version, host, started_at, finished_at,
    shards_total, shards_done, shards_skipped, schema_version, forwards_executed
FROM runs
ORDER BY started_at, run_id;
