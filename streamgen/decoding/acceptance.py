"""Acceptance: which leading draft tokens survive one verify forward (greedy, or threshold τ).

A verify forward yields a :class:`Verification` (per draft position, the verifier's argmax and the draft
token's probability); an :class:`AcceptanceRule` keeps the longest leading run that passes
(:func:`accepted_length`). A leaf module: it imports nothing from the project.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


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
