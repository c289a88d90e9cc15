"""TEST-ONLY fault injection for subprocess tests: an off-by-one in draft acceptance
(tests/workflows/test_nightly.py), or examples made slower in wall time (tests/workflows/test_grid_bad_day.py).

Python imports ``sitecustomize`` at start-up from ``sys.path``, so putting this folder on
``PYTHONPATH`` reaches every process of a run (the driver, Ray's workers, a Slurm job's tasks), which a
pytest monkeypatch cannot. It does something only when BOTH hold:

- this folder is on ``PYTHONPATH`` (nothing in the project puts it there), and
- ``STREAMGEN_TEST_PERTURB=accept-off-by-one`` (or ``slow-examples``, below).

Then ``streamgen.decoding.verification.accepted_length`` keeps ONE more draft token than the rule accepted
(clipped to the draft), before any decoder imports it. The library has no hook of its own: no code
under streamgen/ or jobs/ reads that variable, and ``workflows/nightly.py --update-baseline`` refuses
to run while it is set, so a perturbed run can never become the baseline.
"""

import os

if os.environ.get("STREAMGEN_TEST_PERTURB") == "accept-off-by-one":
    import streamgen.decoding.verification as _base

    _accepted_length = _base.accepted_length

    def _off_by_one(draft, verification, rule):  # type: ignore[no-untyped-def]
        return min(len(draft), _accepted_length(draft, verification, rule) + 1)

    _base.accepted_length = _off_by_one

if os.environ.get("STREAMGEN_TEST_PERTURB") == "slow-examples":
    # Each example's pair waits STREAMGEN_TEST_SLOW_S (default 0.5) seconds first: a run that a test must
    # signal mid-way lasts long enough in wall time on a fast or a loaded machine alike, and its rows are
    # those of an unperturbed run (a sleep changes no token and no count).
    import time as _time

    import streamgen.shared_example as _shared

    _pair = _shared.SharedExample.pair

    def _slow_pair(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _time.sleep(float(os.environ.get("STREAMGEN_TEST_SLOW_S", "0.5")))
        return _pair(self, *args, **kwargs)

    _shared.SharedExample.pair = _slow_pair
