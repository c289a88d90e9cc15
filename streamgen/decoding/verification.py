"""Acceptance applied: which leading draft tokens survive one verify forward, and where a draft ends.

A verify forward yields a :class:`Verification` (per draft position, the verifier's argmax and the draft
token's probability, and for autoregressive verifiers the top-1 minus top-2 margin in units of the
logits dtype's spacing); a rule (:mod:`streamgen.acceptance_rules`: greedy, threshold τ, any other
registered one) keeps the longest leading run that passes (:func:`accepted_length`).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from streamgen.acceptance_rules import AcceptanceRule


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


def draft_is_complete(draft: Sequence[int], accepted: int, eos_ids: Collection[int], limit: int, *,
                      stop: int | None = None) -> bool:
    """A fully accepted draft is the answer only if it ended (EOS, or ``stop``: the draft's first ``stop``
    tokens complete a stop string, ``streamgen.decoding.stops``) or fills the budget ``limit``; a shorter
    unfinished draft must be continued (docs/diffusion.md names the bug of treating it as complete)."""
    return 0 < len(draft) == accepted and (int(draft[-1]) in eos_ids or len(draft) >= limit or stop == len(draft))


def accepted_length(draft: Sequence[int], verification: Verification, rule: AcceptanceRule) -> int:
    """Length of the longest leading run of draft tokens that pass ``rule``."""
    margins: Sequence[float | None] = verification.margins or [None] * len(verification.argmax)
    n = 0
    for tok, top, p, m in zip(draft, verification.argmax, verification.probs, margins, strict=True):
        if not rule.passes(int(tok), int(top), float(p), m):
            break
        n += 1
    return n
