"""TEST-ONLY fault injection for tests/test_nightly.py: an off-by-one in draft acceptance.

Python imports ``sitecustomize`` at start-up from ``sys.path``, so putting this folder on
``PYTHONPATH`` reaches every process of a run (the driver, Ray's workers, a Slurm job's tasks), which a
pytest monkeypatch cannot. It does something only when BOTH hold:

- this folder is on ``PYTHONPATH`` (nothing in the project puts it there), and
- ``STREAMGEN_TEST_PERTURB=accept-off-by-one``.

Then ``streamgen.decoding.acceptance.accepted_length`` keeps ONE more draft token than the rule accepted
(clipped to the draft), before any decoder imports it. The library has no hook of its own: no code
under streamgen/ or jobs/ reads that variable, and ``workflows/nightly.py --update-baseline`` refuses
to run while it is set, so a perturbed run can never become the baseline.
"""

import os

if os.environ.get("STREAMGEN_TEST_PERTURB") == "accept-off-by-one":
    import streamgen.decoding.acceptance as _base

    _accepted_length = _base.accepted_length

    def _off_by_one(draft, verification, rule):  # type: ignore[no-untyped-def]
        return min(len(draft), _accepted_length(draft, verification, rule) + 1)

    _base.accepted_length = _off_by_one
