"""Stop strings: where an answer's text ends besides its EOS and its budget (lm-eval's ``until``).

An answer stops after the token that completes a stop string: the first ``k`` such that the text of
its first ``k`` tokens contains one of the strings, matched on the decoded text with special tokens
kept (so a stop string may span tokens, and a special token's text stops too, as with lm-eval's own
stop criteria, which decode so; transformers' ``StopStringCriteria`` matches token strings alike). The
answer keeps that token and its whole text; the scorer cuts the text at the string (lm-eval's
``postprocess_generated_text``). Every family ends an answer there as it ends one at EOS
(docs/accounting.md, "Stop strings"); a leaf module beside the meter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["StopStrings", "stop_length"]

Detokenise = Callable[[Sequence[int]], str]
"""Token ids → the answer's text with special tokens kept (``AutoregressiveDecoder.decode_raw``)."""


def stop_length(tokens: Sequence[int], strings: Sequence[str], decode: Detokenise) -> int | None:
    """The fewest leading ``tokens`` whose text contains one of ``strings``; None when none does.

    Containment grows with the prefix (a longer prefix's text extends a shorter one's), so the answer is
    found by bisection over prefixes: about log2(len) detokenisations instead of one per token."""
    strings = [s for s in strings if s]
    if not strings or not tokens or not _contains(decode(tokens), strings):
        return None
    lo, hi = 1, len(tokens)  # the text of tokens[:hi] contains a string
    while lo < hi:
        mid = (lo + hi) // 2
        if _contains(decode(tokens[:mid]), strings):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _contains(text: str, strings: Sequence[str]) -> bool:
    return any(s in text for s in strings)


class StopStrings:
    """A decoder's stop strings with its detokeniser: :meth:`length` (where a token list ends) and
    :meth:`ends` (whether an answer that had no stop until its last token has one now)."""

    def __init__(self, strings: Sequence[str] = (), decode: Detokenise | None = None) -> None:
        self.strings = tuple(s for s in strings if s)
        self.decode = decode

    def __bool__(self) -> bool:
        return bool(self.strings)

    def length(self, tokens: Sequence[int]) -> int | None:
        """:func:`stop_length` of ``tokens``; None without stop strings."""
        if not self.strings:
            return None
        assert self.decode is not None, "stop strings need a detokeniser"
        return stop_length(tokens, self.strings, self.decode)

    def ends(self, answer: Sequence[int]) -> bool:
        """Whether ``answer``'s text contains a stop string: checked after every decoded token, the first
        True is at the token that completes it."""
        if not self.strings or not answer:
            return False
        assert self.decode is not None, "stop strings need a detokeniser"
        return _contains(self.decode(answer), self.strings)
