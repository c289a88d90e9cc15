-- Waits over a typist population per cell, preset and drafting policy (docs/typists.md).
-- Reads population_examples (one row per included replayed example × preset × sampled user × policy,
-- built by analysis/population.py). The unit is a (user, request): user u of the preset typing one request.
--   users, seed            the population drawn (users per preset, numpy seed): the figures reproduce from them
--   n                      (user, request) pairs with a wait
--   p50/p90_wait_s         the median and 90th percentile of the wait (end of the last step − last arrival)
--   keeps_up_share         share of pairs where drafting keeps up: every step before the last ended by the
--                          arrival of the next step the policy planned, and none was skipped (docs/timing.md)
--   median_base_wait_s     the base run's wall clock (submit, then decode; the same for every user)
--   median_wait_over_base  median over pairs of wait / base wait
--   beats_base_share       share of pairs whose wait is below the base wait
--   modelled_share         share of pairs with a step costed by the fitted cost model
SELECT
    {cols cell},
    preset, any_value(users) AS users, any_value(seed) AS seed, policy,
    count(*) AS n,
    quantile_cont(wait_s, 0.5) AS p50_wait_s,
    quantile_cont(wait_s, 0.9) AS p90_wait_s,
    avg(keeps_up::DOUBLE) AS keeps_up_share,
    quantile_cont(base_wait_s, 0.5) AS median_base_wait_s,
    quantile_cont(wait_s / base_wait_s, 0.5) AS median_wait_over_base,
    avg((wait_s < base_wait_s)::DOUBLE) AS beats_base_share,
    avg(modelled::DOUBLE) AS modelled_share
FROM population_examples
WHERE wait_s IS NOT NULL
GROUP BY {cols cell}, preset, policy
ORDER BY
    {order setting},
    benchmark, preset, policy;
