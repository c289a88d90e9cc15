"""Progress display of a grid run: examples done (rate, ETA) with shards done and errors alongside."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from tqdm import tqdm

log = logging.getLogger(__name__)


class GridProgress:
    """A tqdm bar over examples (its rate and ETA), with ``shards d/t`` and errors in the postfix.

    Without a terminal the bar is off and each finished shard logs one line instead.
    """

    def __init__(self, *, shards_total: int, examples_total: int, shards_skipped: int = 0,
                 enabled: bool | None = None, file: Any = None) -> None:
        file = file if file is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(file, "isatty", lambda: False)())
        self.shards_total, self.shards_done, self.errors = shards_total, shards_skipped, 0
        self.examples_total, self.examples_done = examples_total, 0
        self.started = time.monotonic()
        self.bar = tqdm(total=examples_total, unit="ex", desc="grid", file=file, disable=not enabled,
                        dynamic_ncols=True, smoothing=0.1)
        self._postfix()

    def shard_done(self, examples: int, errors: int) -> None:
        self.shards_done += 1
        self.errors += errors
        self.examples_done += examples
        self.bar.update(examples)
        self._postfix()
        if self.bar.disable:
            rate = self.examples_done / max(time.monotonic() - self.started, 1e-9)
            eta = (self.examples_total - self.examples_done) / rate if rate > 0 else float("nan")
            log.info("shards %d/%d, examples %d/%d, errors %d, %.2f ex/s, ETA %.0f s", self.shards_done,
                     self.shards_total, self.examples_done, self.examples_total, self.errors, rate, eta)

    def _postfix(self) -> None:
        self.bar.set_postfix_str(f"shards {self.shards_done}/{self.shards_total} errors {self.errors}")

    def close(self) -> None:
        self.bar.close()
