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

import pytest  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    import torch

    # 2 threads under load were 5-10x slower than 1 on these machines (environment notes).
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA (run on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
