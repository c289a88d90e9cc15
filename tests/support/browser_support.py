"""Debian's chromium driven by playwright, for the page tests (never ``playwright install``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium(viewport: dict[str, int]) -> Iterator[Any]:
    """A persistent headless chromium context; skips with the reason when chromium or playwright is missing."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM}: apt-get install -y chromium")
    profile = tempfile.mkdtemp(prefix="streamgen-chromium-")
    with playwright.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True,
                                                        args=CHROMIUM_ARGS, viewport=viewport)
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)
