"""Base decodes remembered within one example: a LLaDA/Dream decode of a request prefix, run once.

A LLaDA/Dream stream step that keeps nothing of its draft leaves the buffer as the request prefix plus
all masks, so its denoising is exactly the base decode of that prefix (docs/diffusion.md); the last such
step is the pair's base run of the complete request. :class:`DecodeMemo` holds, per rendered buffer,
what that denoising produced and what it cost, so a second decode of the same buffer (another cell's
step, the other verifier mode, the base run) takes the result and records the first one's cost
(docs/accounting.md, "Shared work": walls of shared work are the one run's). ``saved`` sums what was
taken instead of run, so the caller can count what executed. A leaf module beside the meter.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from streamgen.decoding.meter import MeterReading

ZERO = MeterReading(0, 0, 0.0)


@dataclass(frozen=True)
class Decoded:
    """One denoising of a buffer: the final state (``state``, the family's own) and its cost."""

    state: Any  # the family's own record of the finished buffer
    meter: MeterReading
    wall_s: float


@dataclass
class DecodeMemo:
    """Decodes of one example's buffers, by key; ``saved`` is what hits took instead of running."""

    entries: dict[Hashable, Decoded] = field(default_factory=dict)
    saved: MeterReading = ZERO
    hits: int = 0

    def get(self, key: Hashable) -> Decoded | None:
        found = self.entries.get(key)
        if found is not None:
            self.hits += 1
            self.saved = self.saved + found.meter
        return found

    def put(self, key: Hashable, decoded: Decoded) -> None:
        self.entries[key] = decoded
