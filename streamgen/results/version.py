"""The code version stamped on every result row: the git commit (``+dirty`` when the tree has edits)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from streamgen import __version__

_ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def code_version() -> str:
    """``<package version>+g<commit>[.dirty]``, or the package version outside a git checkout."""
    try:
        sha = subprocess.run(["git", "-C", str(_ROOT), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+g{sha}{'.dirty' if dirty else ''}"
