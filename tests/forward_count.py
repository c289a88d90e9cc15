"""Counting real model calls independently of ForwardMeter: a forward pre-hook on the torch module."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class CallCount:
    calls: int = 0


@contextmanager
def counting_calls(module: Any) -> Iterator[CallCount]:
    """Count every call of ``module`` (its ``forward`` pre-hook fires once per call, whatever the
    decoder's meter says) while the block runs."""
    count = CallCount()

    def hook(_module: Any, _args: Any) -> None:
        count.calls += 1

    handle = module.register_forward_pre_hook(hook)
    try:
        yield count
    finally:
        handle.remove()
