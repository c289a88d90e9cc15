"""The model's one worker thread: model calls run off the event loop, one at a time.

One model, sequential steps: every call that touches the decoder (stream steps, the base decode,
tokenising for the context check, decoding drafts to text) goes through :meth:`ModelWorker.run`,
which runs it on a single thread under a lock, so the event loop stays free to serve other tabs
and the tokenizer is never used from two threads at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from streamgen.decoding.base import Decoder

T = TypeVar("T")


class ModelWorker:
    """Runs calls on ``decoder`` in one thread, strictly one after another."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamgen-demo-model")
        self._lock = threading.Lock()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the model thread; the caller awaits without blocking the loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._locked, fn, args)

    def _locked(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._lock:
            return fn(*args)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
