"""Common test settings: one torch thread, loopback-only Ray, offline hub, the repository's data, seeded everything."""

from __future__ import annotations

import os

# Set before torch/transformers/ray are imported by any test module.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Tests read the repository's own data/ (the default), never a data directory set outside.
os.environ.pop("STREAMGEN_DATA_DIR", None)

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest_plugins = ["tests.support.suite_clock"]  # --test-times, --suite-budget: the suite watches its own time

# Under pytest-xdist (.ci/run: -n 2 --dist loadgroup; docs/testing.md) a file is one unit of work, so
# its module fixtures run once. The files below take the whole machine (they start Ray, submit to the
# Slurm cluster or drive a browser, and several wait on timers or signals): they form one group that
# runs on one worker, one file after another, so no two of them ever compete for the two cores.
# File names, not paths: they are unique under tests/ (tests/repo/test_test_layout.py checks it).
MACHINE_GROUP = "machine"
MACHINE_FILES = frozenset({
    # the real Slurm cluster of .ci/slurm.sh
    "test_slurm_cluster.py", "test_slurm_partition.py", "test_slurm_rehearsal.py", "test_allocation_fit.py",
    # a real two-node Ray in the network namespaces of .ci/slurm.sh (ray job submit)
    "test_ray_job_submit.py",
    # local Ray, in this process or in a grid's own process (several also signal or kill it)
    "test_actor_placement.py", "test_adapt_workflow.py", "test_benchmark_from_data_grid.py",
    "test_estimate_counts.py", "test_full_grid_cli.py", "test_grid_bad_day.py", "test_grid_e2e.py",
    "test_grid_fingerprints.py", "test_grid_scripted.py", "test_lm_eval_tasks.py", "test_nightly.py",
    "test_scheduler.py", "test_spool.py",
    # a Ray cluster the test starts with `ray start` (a head and a second raylet)
    "test_existing_ray.py",
    # a real browser
    "test_demo_browser.py", "test_view_browser.py",
})
# The last CI run's times (written by .ci/run, committed when refreshed): workers take the longest units
# first, so that no long file starts last and runs on alone at the end.
TIMES_REFERENCE = Path(__file__).resolve().parents[1] / ".ci" / "test-times.tsv"


def pytest_configure(config: pytest.Config) -> None:
    import torch

    if config.getoption("dist", "no") == "loadgroup":
        config.option.loadscopereorder = False  # keep the longest-first order set below, not xdist's by count

    # 2 threads under load were 5-10x slower than 1 on these machines (environment notes).
    torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_unit(item)))
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike, the controller hands out
        items.sort(key=_longest_first(items))
    _skip_gpu_tests(items)


def _unit(item: pytest.Item) -> str:
    name = Path(str(item.fspath)).name
    return MACHINE_GROUP if name in MACHINE_FILES else name


def _longest_first(items: list[pytest.Item]) -> Callable[[pytest.Item], tuple[float, int, int]]:
    """Sort key: units by their seconds in the reference run, longest first (ties and units the reference
    lacks keep collection order); tests keep their order inside a unit."""
    from tests.support.suite_clock import plain_id, read_times

    seconds: dict[str, float] = {}
    times = read_times(TIMES_REFERENCE) if TIMES_REFERENCE.is_file() else {}
    for item in items:
        ref = times.get(plain_id(item.nodeid))
        seconds[_unit(item)] = seconds.get(_unit(item), 0.0) + (ref.seconds if ref else 0.0)
    position = {item.nodeid: i for i, item in enumerate(items)}
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(_unit(item), position[item.nodeid])
    return lambda item: (-seconds[_unit(item)], first_seen[_unit(item)], position[item.nodeid])


def _skip_gpu_tests(items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA (run on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
