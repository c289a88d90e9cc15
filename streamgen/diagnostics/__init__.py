"""Diagnostics of a model on its own decodes: where a stream answer departs from its base (divergence), and the
verifier probe of paper §6.5 (probe)."""
