"""Diagnostics of a model on its own decodes: where a stream answer departs from its base (divergence), and the
verifier probe of paper §6.5 (probe_drafts; run by workflows/verifier_probe.py, tabled by analysis/probe_report.py).

Modules:

    divergence.py    a pair's first differing token, the margins there, draft branch or regenerated
    probe_drafts.py  paper §6.5's probe: own / unrelated / random drafts scored by every verifier, greedy and each τ → ProbeRecord rows
"""
