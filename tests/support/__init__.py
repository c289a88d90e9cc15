"""What the tests share, kept out of the test files (no test is collected here).

Helpers, one line each:

    analysis_fixtures.py   hypothesis strategies for valid record sets, written as a results directory
    browser_support.py     Debian's chromium driven by playwright (never ``playwright install``)
    checkpoint_cache.py    the study checkpoints scaled down as a Hugging Face cache, from fixtures/checkpoints/
    demo_support.py        the demo tests' tiny decoder, demo config and real server in a thread
    ds1000_support.py      DS-1000's interpreter: its tests skip without it, and fail on CI
    forward_count.py       real model calls counted by a forward pre-hook, independently of the meter
    fs_support.py          real file-system faults: a small tmpfs (a full disk), remountable read-only
    lm_eval_tasks.py       lm-eval task folders in lm-eval's own YAML styles, over local JSONL
    official_samplers.py   simple reimplementations of the official diffusion samplers (``python -m`` prints the parity table)
    ray_two_nodes.py       a real two-node Ray cluster (head and worker in .ci/slurm.sh's network namespaces) for ray job submit
    rope_reference.py      a simple forward with RoPE in float32, the independent side of the RoPE tests
    row_support.py         a row context from a real cell of the configs, for rows built without a grid
    suite_clock.py         the pytest plugin by which the suite watches its own time (docs/testing.md, "Time")
    synthetic.py           realistic synthetic result directories, column-wise (fast at 10^6 rows)
    timing_oracle.py       a deliberately simple tick-stepped simulator of the timing layer
    typing_reference.py    the per-example typing evaluation, the reference for the array one
    view_support.py        a small real results directory for the viewer's tests

Data: ``fixtures/checkpoints/`` (the study models' ``config.json`` and weight shapes, read by
checkpoint_cache.py) and ``perturb/`` (a TEST-ONLY ``sitecustomize`` that a subprocess test puts on
``PYTHONPATH`` to inject a fault into every process of a run).
"""
