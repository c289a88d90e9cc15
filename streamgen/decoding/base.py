"""The decoder protocol every model family implements, the forward meter, and acceptance rules.

A *forward* is one call of the model, whatever the number of tokens fed (DESIGN §2). Every call a
decoder makes goes through :class:`ForwardMeter`, which counts it, records the tokens fed and the
device-synchronised wall time. Forward counts are exact and deterministic: regression tests pin them.

The stream procedure (`streamgen.stream`) only talks to :class:`Decoder` and :class:`StreamSession`,
so autoregressive, ReFusion and bidirectional decoders are interchangeable behind it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Family = Literal["autoregressive", "refusion", "bidirectional", "diffusion_gemma"]
Message = dict[str, str]
"""One chat turn: ``{"role": "system" | "user" | "assistant", "content": str}``."""


# --------------------------------------------------------------------------------------------
# Forward meter
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForwardCall:
    """One model call: what it was for, how many tokens it fed, how long it took (seconds)."""

    kind: str
    tokens_fed: int
    wall_s: float


@dataclass(frozen=True)
class MeterReading:
    """Cumulative totals of a :class:`ForwardMeter` at one instant."""

    forwards: int
    tokens_fed: int
    forward_wall_s: float

    def __sub__(self, other: MeterReading) -> MeterReading:
        return MeterReading(
            self.forwards - other.forwards,
            self.tokens_fed - other.tokens_fed,
            self.forward_wall_s - other.forward_wall_s,
        )


def _no_sync() -> None:
    return None


def device_synchronizer(device: Any) -> Callable[[], None]:
    """Return a function that blocks until all queued work on ``device`` has finished.

    CUDA kernels run asynchronously: reading the clock without synchronising measures launch time,
    not compute time. On CPU there is nothing to wait for.
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    if dev.type == "mps":
        return torch.mps.synchronize
    return _no_sync


@dataclass
class ForwardMeter:
    """Counts every model call with tokens fed and device-synchronised wall time.

    Use :meth:`call` around each model invocation (``with meter.call("decode", 1): model(...)``).
    ``clock`` and ``sync`` are injected so tests can pass a fake clock.
    """

    clock: Callable[[], float] = time.perf_counter
    sync: Callable[[], None] = _no_sync
    calls: list[ForwardCall] = field(default_factory=list)

    @contextmanager
    def call(self, kind: str, tokens_fed: int) -> Iterator[None]:
        self.sync()
        start = self.clock()
        yield
        self.sync()
        self.calls.append(ForwardCall(kind, int(tokens_fed), self.clock() - start))

    def reading(self) -> MeterReading:
        return MeterReading(
            forwards=len(self.calls),
            tokens_fed=sum(c.tokens_fed for c in self.calls),
            forward_wall_s=sum(c.wall_s for c in self.calls),
        )

    @contextmanager
    def span(self) -> Iterator[Span]:
        """Measure a region end to end (synchronised) and the forwards made inside it."""
        span = Span()
        self.sync()
        start_reading, start = self.reading(), self.clock()
        try:
            yield span
        finally:
            self.sync()
            span.wall_s = self.clock() - start
            span.meter = self.reading() - start_reading


@dataclass
class Span:
    """Filled in when a :meth:`ForwardMeter.span` block exits."""

    wall_s: float = 0.0
    meter: MeterReading = field(default_factory=lambda: MeterReading(0, 0, 0.0))


# --------------------------------------------------------------------------------------------
# Acceptance rules
# --------------------------------------------------------------------------------------------


class AcceptanceRule(Protocol):
    """Decides how many leading draft tokens survive verification."""

    @property
    def name(self) -> Literal["greedy", "threshold"]: ...

    @property
    def tau(self) -> float | None: ...

    def passes(self, draft_token: int, argmax_token: int, prob: float) -> bool: ...


@dataclass(frozen=True)
class Greedy:
    """A draft token passes if it equals the verifier's argmax at its position (lossless for AR)."""

    name: Literal["greedy", "threshold"] = "greedy"
    tau: float | None = None

    def passes(self, draft_token: int, argmax_token: int, prob: float) -> bool:
        return draft_token == argmax_token


@dataclass(frozen=True)
class Threshold:
    """A draft token passes if the verifier's probability for it is at least ``tau`` (lossy).

    ``tau`` is a probability in [0, 1] (docs/accounting.md, "Acceptance threshold τ"): τ = 0 accepts
    every token (even one whose probability underflows to 0); 0 < τ < 1 accepts ``p >= τ``, with ``p``
    the fp32 softmax of fp32 logits; τ = 1 accepts nothing. A true softmax never reaches 1, but fp32
    rounds it to exactly 1.0 once the logit margin passes ~16.6, so ``p >= 1`` would accept confident
    tokens of trained models: τ = 1 is defined as the limit, "keep nothing", instead."""

    tau: float | None = 0.5
    name: Literal["greedy", "threshold"] = "threshold"

    def __post_init__(self) -> None:
        if self.tau is None or not math.isfinite(self.tau) or not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"threshold acceptance needs tau in [0, 1], got {self.tau!r}: e.g. tau=0.9")

    def passes(self, draft_token: int, argmax_token: int, prob: float) -> bool:
        assert self.tau is not None
        return self.tau < 1.0 and prob >= self.tau


def make_rule(acceptance: str, tau: float | None = None) -> AcceptanceRule:
    """Build an acceptance rule from its config name (``greedy`` or ``threshold`` with ``tau``)."""
    if acceptance == "greedy":
        return Greedy()
    if acceptance == "threshold":
        if tau is None:
            raise ValueError("acceptance=threshold needs tau=<value in [0, 1]>, e.g. tau=0.9")
        return Threshold(tau=float(tau))
    raise ValueError(f"unknown acceptance rule {acceptance!r}: use acceptance=greedy or acceptance=threshold")


@dataclass(frozen=True)
class Verification:
    """Result of ONE verify forward: per draft position, the verifier's argmax and the draft token's
    probability under the verifier."""

    argmax: tuple[int, ...]
    probs: tuple[float, ...]

    @property
    def median_prob(self) -> float | None:
        """Median verifier probability over the draft's tokens (None for an empty draft).

        Paper §6.5: a bidirectional verifier that sees the draft gives even an unrelated draft ~1.0."""
        return float(statistics.median(self.probs)) if self.probs else None


def cut_draft(draft: Sequence[int], eos_ids: Collection[int], limit: int, *, keep_eos: bool = True) -> list[int]:
    """``draft`` up to ``limit`` tokens, ending at its first EOS (kept or dropped per ``keep_eos``).

    An answer never extends past its EOS or its budget. Every family verifies the EOS as a draft
    position (docs/diffusion.md, "The end of an accepted draft"), so decoders keep it."""
    out: list[int] = []
    for tok in draft[:limit]:
        if int(tok) in eos_ids:
            if keep_eos:
                out.append(int(tok))
            break
        out.append(int(tok))
    return out


def draft_is_complete(draft: Sequence[int], accepted: int, eos_ids: Collection[int], limit: int) -> bool:
    """A fully accepted draft is the answer only if it ended (EOS) or fills the budget ``limit``;
    a shorter unfinished draft must be continued (reference/decoders.md §5.2, the reimplementers' bug)."""
    return 0 < len(draft) == accepted and (int(draft[-1]) in eos_ids or len(draft) >= limit)


def accepted_length(draft: Sequence[int], verification: Verification, rule: AcceptanceRule) -> int:
    """Length of the longest leading run of draft tokens that pass ``rule``."""
    n = 0
    for tok, top, p in zip(draft, verification.argmax, verification.probs, strict=True):
        if not rule.passes(int(tok), int(top), float(p)):
            break
        n += 1
    return n


# --------------------------------------------------------------------------------------------
# Results and the decoder protocol
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Generation:
    """A complete answer and what it cost.

    ``token_ids`` include the EOS token when decoding stopped at EOS (``finished``); ``text`` is the
    decoded answer without special tokens. ``wall_s`` is end-to-end, device-synchronised;
    ``meter`` holds forwards, tokens fed and the wall time spent inside forwards.
    """

    token_ids: tuple[int, ...]
    text: str
    finished: bool
    wall_s: float
    meter: MeterReading

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
