"""Acceptance: which leading draft tokens survive one verify forward (greedy, or threshold τ).

A verify forward yields a :class:`Verification` (per draft position, the verifier's argmax and the draft
token's probability, and for autoregressive verifiers the top-1 minus top-2 margin in units of the
logits dtype's spacing); an :class:`AcceptanceRule` keeps the longest leading run that passes
(:func:`accepted_length`). Greedy's ``tie_guard`` refuses draft tokens the verifier prefers by no more
than that many spacings (docs/numerics.md). A leaf module: it imports nothing from the project.
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

    @property
    def tie_guard(self) -> float | None: ...

    def passes(self, draft_token: int, argmax_token: int, prob: float, margin: float | None = None) -> bool:
        """``margin``: the verifier's top-1 minus top-2 at this position in dtype spacings (None: unknown)."""
        ...

    def guarded(self, margin: float | None) -> bool:
        """True where the verify forward must not decide this position's token (greedy's tie_guard)."""
        ...


class TieGuardUnsupported(ValueError):
    """``tie_guard`` was asked of a verifier that reports no top-2 margins (only autoregressive ones do)."""


@dataclass(frozen=True)
class Greedy:
    """A draft token passes if it equals the verifier's argmax at its position (lossless for AR in exact
    arithmetic). With ``tie_guard`` = g (dtype spacings), it must also beat the runner-up by more than g:
    at a near tie the verify forward's rounding does not decide, a one-token decode step does."""

    name: Literal["greedy", "threshold"] = "greedy"
    tau: float | None = None
    tie_guard: float | None = None

    def __post_init__(self) -> None:
        if self.tie_guard is not None and not (math.isfinite(self.tie_guard) and self.tie_guard >= 0):
            raise ValueError(f"tie_guard={self.tie_guard!r} must be a finite number of spacings ≥ 0, e.g. 1")

    def passes(self, draft_token: int, argmax_token: int, prob: float, margin: float | None = None) -> bool:
        return draft_token == argmax_token and not self.guarded(margin)

    def guarded(self, margin: float | None) -> bool:
        """True where the guard refuses to let the verify forward decide (margin within the guard)."""
        if self.tie_guard is None:
            return False
        if margin is None:
            raise TieGuardUnsupported("tie_guard needs the verifier's top-2 margins, which only autoregressive "
                                      "decoders report: drop tie_guards for this model")
        return margin <= self.tie_guard


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
    tie_guard: float | None = None  # greedy only

    def __post_init__(self) -> None:
        if self.tau is None or not math.isfinite(self.tau) or not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"threshold acceptance needs tau in [0, 1], got {self.tau!r}: e.g. tau=0.9")

    def passes(self, draft_token: int, argmax_token: int, prob: float, margin: float | None = None) -> bool:
        assert self.tau is not None
        return self.tau < 1.0 and prob >= self.tau

    def guarded(self, margin: float | None) -> bool:
        return False


def make_rule(acceptance: str, tau: float | None = None, tie_guard: float | None = None) -> AcceptanceRule:
    """Build an acceptance rule from its config name (``greedy`` [with ``tie_guard``] or ``threshold``
    with ``tau``)."""
    if tie_guard is not None and acceptance != "greedy":
        raise ValueError(f"tie_guard applies to acceptance=greedy only, not {acceptance!r}")
    if acceptance == "greedy":
        return Greedy(tie_guard=None if tie_guard is None else float(tie_guard))
    if acceptance == "threshold":
        if tau is None:
            raise ValueError("acceptance=threshold needs tau=<value in [0, 1]>, e.g. tau=0.9")
        return Threshold(tau=float(tau))
    raise ValueError(f"unknown acceptance rule {acceptance!r}: use acceptance=greedy or acceptance=threshold")


@dataclass(frozen=True)
class Verification:
    """Result of ONE verify forward: per draft position, the verifier's argmax and the draft token's
    probability under the verifier; ``margins`` (autoregressive verifiers; None elsewhere) the top-1
    minus top-2 logit in units of the logits dtype's spacing at the top-1 logit."""

    argmax: tuple[int, ...]
    probs: tuple[float, ...]
    margins: tuple[float, ...] | None = None

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
    a shorter unfinished draft must be continued (docs/diffusion.md names the bug of treating it as complete)."""
    return 0 < len(draft) == accepted and (int(draft[-1]) in eos_ids or len(draft) >= limit)


def accepted_length(draft: Sequence[int], verification: Verification, rule: AcceptanceRule) -> int:
    """Length of the longest leading run of draft tokens that pass ``rule``."""
    margins: Sequence[float | None] = verification.margins or [None] * len(verification.argmax)
    n = 0
    for tok, top, p, m in zip(draft, verification.argmax, verification.probs, margins, strict=True):
        if not rule.passes(int(tok), int(top), float(p), m):
            break
        n += 1
    return n
