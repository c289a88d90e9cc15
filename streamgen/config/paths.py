"""Where the configuration lives: the repository root, ``configs/`` and the benchmark data directory."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def configs_dir() -> Path:
    """``configs/`` of this checkout, or ``$STREAMGEN_CONFIGS``."""
    return Path(os.environ.get("STREAMGEN_CONFIGS", REPO_ROOT / "configs"))


def default_data_dir() -> Path:
    """``$STREAMGEN_DATA_DIR``, else the repository's own ``data/`` (offline benchmark data + manifest)."""
    return Path(os.environ.get("STREAMGEN_DATA_DIR", REPO_ROOT / "data"))


def resolve_data_dir(data_dir: Path | str | None) -> Path:
    """The benchmark data directory to read: ``data_dir`` when set (a grid's ``data_dir``, a
    ``--data-dir`` argument), else :func:`default_data_dir`. The one place this choice is made."""
    return Path(data_dir) if data_dir else default_data_dir()
