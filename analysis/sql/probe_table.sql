-- Paper §6.5's probe (streamgen/diagnostics/probe_drafts.py, workflows/verifier_probe.py): per (model, benchmark, verifier, draft
-- kind, acceptance rule), over the examples' verdicts. One row per record in `probe`; one verify
-- forward gave the median probability of every rule of a (draft, verifier), so it is the same per rule.
--   n_examples       examples scored (each example's draft once)
--   median_prob      median over examples of the draft's median token probability
--   accepted_share   Σ accepted tokens / Σ draft tokens (the share of draft tokens kept)
--   whole_share      share of drafts accepted whole (accepted = draft: "every one of its 96 tokens")
--   mean_draft_tokens  mean draft length (positions scored)
SELECT
    model, family, benchmark, verifier, draft_kind, acceptance, tau,
    count(DISTINCT example_id) AS n_examples,
    quantile_cont(median_prob, 0.5) AS median_prob,
    sum(accepted_tokens)::DOUBLE / NULLIF(sum(draft_tokens), 0) AS accepted_share,
    avg((accepted_tokens >= draft_tokens)::DOUBLE) AS whole_share,
    avg(draft_tokens) AS mean_draft_tokens
FROM probe
GROUP BY model, family, benchmark, verifier, draft_kind, acceptance, tau
ORDER BY model, benchmark, verifier, CASE draft_kind WHEN 'own' THEN 0 WHEN 'unrelated' THEN 1 ELSE 2 END,
    acceptance, tau NULLS FIRST;
