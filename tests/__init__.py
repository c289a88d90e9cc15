"""The test suite. Its folders mirror the repository: a module's tests are ``tests/<its folder>/test_<its
name>.py`` (``streamgen/decoding/meter.py`` → ``tests/streamgen/decoding/test_meter.py``), or docs/testing.md's
table "Where a module's behaviour is tested" names them. ``repo/``: the repository as a whole; ``bench/``:
bench/'s scripts; ``support/``: the helpers and their data; ``conftest.py``: the common settings and the xdist
groups. Layout, tiers, workers and the suite's clock: docs/testing.md."""
