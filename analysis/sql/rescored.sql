-- The rows the tables count whose scores come from `python -m analysis.rescore` rather than from the
-- grid, per cell and (scorer version at decoding → scorer version now): how many, how many changed
-- quality on either side, and which examples changed (ids, in order).
SELECT
    {cols cell},
    coalesce(decode_scorer_version, 'unversioned') AS scorer_version_before,
    scorer_version,
    count(*) AS n_rescored,
    count(*) FILTER (WHERE base_quality IS DISTINCT FROM decode_base_quality
                        OR stream_quality IS DISTINCT FROM decode_stream_quality) AS n_changed,
    string_agg(example_id, ' ' ORDER BY example_id) FILTER (
        WHERE base_quality IS DISTINCT FROM decode_base_quality
           OR stream_quality IS DISTINCT FROM decode_stream_quality) AS examples_changed,
    max(rescore_id) AS last_rescore
FROM pairs
WHERE rescore_id IS NOT NULL
GROUP BY ALL
ORDER BY
    {order setting}, benchmark,
    scorer_version_before, scorer_version;
