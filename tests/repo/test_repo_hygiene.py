"""No tracked file keeps a merge's conflict markers: a merge once left `<<<<<<< HEAD` … `>>>>>>> corrections`
in docs/typists.md, with a stale paragraph between them, and nothing noticed (Python would not import such a
module, but a document, YAML comment or SQL file reads on)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# git writes `<<<<<<< label` and `>>>>>>> label` (the label may be empty); `=======` alone could be a
# Markdown heading underline, so only the two outer markers are sought.
MARKER = re.compile(rb"^(<{7}|>{7})( |$)", re.MULTILINE)


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout ({exc}): the tracked files are unknown")
    return [ROOT / name for name in out.decode().split("\0") if name]


def markers(data: bytes) -> list[int]:
    """Line numbers (1-based) of conflict markers in ``data``."""
    return [data.count(b"\n", 0, m.start()) + 1 for m in MARKER.finditer(data)]


def test_the_marker_pattern_finds_what_git_writes_and_nothing_else() -> None:
    merged = b"a\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> corrections\nb\n"
    assert markers(merged) == [2, 6]
    assert markers(b"Title\n=======\n<<<<<<<< eight\n>>>>>>>>x\n>> quoted\n") == []


def test_no_tracked_file_holds_a_conflict_marker() -> None:
    files = tracked_files()
    assert len(files) > 100, "the checkout's file list looks truncated"
    found = {str(f.relative_to(ROOT)): lines for f in files if f.is_file()
             and (lines := markers(f.read_bytes()))}
    assert not found, f"conflict markers left by a merge (file: lines): {found}; resolve them and commit"
