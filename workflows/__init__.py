"""workflows: thin entry scripts over jobs/ and streamgen/, and analysis/ through its face only
(tests/repo/test_import_direction.py). Each script's docstring gives its local, debug and Slurm commands.

Modules:

    full_grid.py       run a grid (grid=NAME + key=value), print the summary tables
    nightly.py         the nightly grid against baselines/nightly.json; exit 1 on regression
    adapt.py           adapt a model to incomplete requests and print Table 3 (adapt=NAME stage=...)
    verifier_probe.py  the §6.5 verifier probe over a benchmark's examples per model (key=value), then its table
"""
