"""Real file-system faults for tests: a small tmpfs (a full disk) that can be remounted read-only.

Mounting needs root (CI runs as root); elsewhere the tests that need it skip, naming why.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


class SmallDisk:
    """A tmpfs of ``size_kb`` mounted at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read_only(self) -> None:
        _mount(["-o", "remount,ro", str(self.path)])

    def fill(self) -> None:
        """Write zeros until the disk is full."""
        fd = os.open(self.path / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError, match="No space left"):
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)


def _mount(args: list[str]) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here (mount {' '.join(args)}: {proc.stderr.strip()}); run as root")


def small_disk(tmp_path: Path, size_kb: int) -> Iterator[SmallDisk]:
    """Mount, yield, unmount (lazily: a failed test may still hold a file open)."""
    mnt = tmp_path / f"disk{size_kb}k"
    mnt.mkdir()
    _mount(["-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mnt)])
    try:
        yield SmallDisk(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def repo_results_lock() -> Any:
    """A lock on the repository's own ``results/`` folder, shared by pytest-xdist workers: held by the
    tests that write there (a debug-executor run's submitit logs, the SmolLM2 table) and by the README
    test that asserts a dry run writes nothing there, so that one never sees the others' files."""
    import filelock

    from streamgen.config import REPO_ROOT

    key = hashlib.sha256(str(REPO_ROOT).encode()).hexdigest()[:12]
    return filelock.FileLock(Path(tempfile.gettempdir()) / f"streamgen-tests-results-{key}.lock")
