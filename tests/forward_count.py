"""Counting real model calls independently of ForwardMeter: a forward pre-hook on the torch module."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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


def predicted_forwards_executed(pairs: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]], *,
                                share: bool) -> int:
    """The model calls a unit's rows imply: without sharing every cell pays its base run and all its
    steps; with sharing each example's base run and step 1 are paid once per model (the cells of one
    example share them), the later steps per cell."""
    later = sum(s["forwards"] for s in steps if s["step"] > 1)
    if not share:
        return sum(p["base_forwards"] for p in pairs) + sum(s["forwards"] for s in steps)
    per_example = {(p["model"], p["example_id"]): p["base_forwards"] for p in pairs}
    first = {(s["model"], s["example_id"]): s["forwards"] for s in steps if s["step"] == 1}
    assert first.keys() == per_example.keys()
    return sum(per_example.values()) + sum(first.values()) + later
