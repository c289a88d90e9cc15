"""The decoder protocol every model family implements, and what one decoding step returns.

The stream procedure (`streamgen.stream`) only talks to :class:`Decoder` and :class:`StreamSession`,
so autoregressive, ReFusion, bidirectional and DiffusionGemma decoders are interchangeable behind it.
The vocabulary they share lives in leaf modules: the forward meter (:mod:`streamgen.decoding.meter`),
acceptance rules (:mod:`streamgen.decoding.verification`) and chat messages (:mod:`streamgen.requests.chat`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from streamgen.acceptance_rules import AcceptanceRule
from streamgen.config import Family
from streamgen.decoding.meter import MeterReading
from streamgen.requests.chat import Message
from streamgen.requests.request import common_prefix_length

__all__ = ["Decoder", "Family", "Generation", "StepResult", "StreamSession", "common_prefix_length",
           "draft_fingerprint"]


@dataclass(frozen=True)
class Generation:
    """A complete answer and what it cost.

    ``token_ids`` include the EOS token when decoding stopped at EOS (``finished``); ``text`` is the
    decoded answer without special tokens. ``wall_s`` is end-to-end, device-synchronised;
    ``meter`` holds forwards, tokens fed and the wall time spent inside forwards. ``margins``
    (autoregressive decoders; None elsewhere): per answer token, the top-1 minus top-2 logit of the
    forward row that chose it, in units of the logits dtype's spacing (``streamgen.decoding.numerics``).
    ``stopped``: decoding stopped at the token completing a stop string (``streamgen.decoding.stops``);
    ``text`` then holds the stop string and whatever that token adds after it (the scorer cuts it).
    """

    token_ids: tuple[int, ...]
    text: str
    finished: bool
    wall_s: float
    meter: MeterReading
    margins: tuple[float, ...] | None = None
    stopped: bool = False

    @property
    def forwards(self) -> int:
        return self.meter.forwards


@dataclass(frozen=True)
class StepResult:
    """One segment arrival in the stream run: verify the previous draft, accept, regenerate.

    ``answer`` is the new draft ``D_i`` with the cost of this step only. ``accepted_tokens`` is the
    accepted leading run of the incoming draft; ``generated_tokens`` are the tokens produced after it.
    """

    draft_tokens_in: int
    accepted_tokens: int
    generated_tokens: int
    answer: Generation
    extra: dict[str, float] = field(default_factory=dict)


class StreamSession(Protocol):
    """Per-example state carried across segment arrivals (e.g. the request's KV cache)."""

    def step(self, messages: Sequence[Message], draft: Sequence[int], rule: AcceptanceRule) -> StepResult:
        """Verify ``draft`` against the request ``messages`` in one forward, accept, regenerate.

        An empty ``draft`` (first arrival) means: decode from scratch, reusing any cached prefix.
        """
        ...

    def close(self) -> None: ...


@runtime_checkable
class Decoder(Protocol):
    """What the stream procedure needs from a model family."""

    family: Family
    max_new_tokens: int

    @property
    def max_context(self) -> int | None:
        """Tokens the model can attend to (request + answer), or None when unbounded."""
        ...

    @property
    def min_residual_forwards(self) -> int:
        """The family's floor on a stream step's forwards (1 autoregressive, 3 ReFusion; docs/diffusion.md)."""
        ...

    def for_benchmark(self, benchmark: str) -> Decoder:
        """This decoder with the model's per-benchmark settings applied (same weights and meter)."""
        ...

    def with_stop_strings(self, strings: Sequence[str]) -> Decoder:
        """This decoder (same weights and meter) ending every answer, base run and stream steps alike, after
        the token that completes one of ``strings`` (a benchmark's stop strings; docs/accounting.md)."""
        ...

    def generate(self, messages: Sequence[Message]) -> Generation:
        """Base run: decode the complete request from scratch (no cache reuse)."""
        ...

    def open_stream(self) -> StreamSession:
        """A fresh session for one example's stream run."""
        ...

    def count_request_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens of the rendered request (chat template included), for context-length checks."""
        ...

    def decode_text(self, token_ids: Sequence[int]) -> str: ...


def draft_fingerprint(token_ids: Sequence[int]) -> str:
    """A short hash of a draft's token ids: equal drafts, equal fingerprints (16 hex characters). The
    steps rows' ``draft_fingerprint`` column and the demo page's draft ids."""
    return hashlib.sha256(",".join(map(str, token_ids)).encode()).hexdigest()[:16]
