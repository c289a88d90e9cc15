"""Quality metrics: pass@1 from an execution status, normalised token-level F1 for text answers.

pass@1 here is greedy, one sample per example: 1.0 when the program's tests passed, 0.0 when they
failed or timed out. An ``error`` status (the sandbox could not run the program) is not a verdict:
:func:`pass_at_1` refuses it so that a crashed scorer cannot look like a wrong answer.

Token F1 follows the SQuAD convention: lower-case, drop punctuation and the articles a/an/the,
split on whitespace, then F1 of the multiset overlap. Two empty token lists score 1.0; one empty
list scores 0.0. Exact match uses the same normalisation: 1.0 when the normalised texts are equal.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

__all__ = ["ExecutionVerdictError", "normalize_text", "pass_at_1", "pass_at_k", "text_tokens", "token_f1",
           "best_token_f1", "best_exact_match", "VERDICTS"]

VERDICTS = ("passed", "failed", "timeout")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


class ExecutionVerdictError(ValueError):
    """An execution status that is not a verdict (``error``: retry the sandbox) or is unknown."""


def pass_at_1(status: str) -> float:
    """1.0 for ``passed``, 0.0 for ``failed``/``timeout``; raises for ``error`` or anything else."""
    if status not in VERDICTS:
        raise ExecutionVerdictError(
            f"status {status!r} is not a verdict (one of {VERDICTS}); an 'error' means the sandbox "
            "failed to run the program: rerun it instead of scoring it")
    return 1.0 if status == "passed" else 0.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. (2021) from ``n`` samples of which ``c`` passed."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@lru_cache(maxsize=8192)  # per character: a text's characters repeat, the category lookup is the cost
def _is_punctuation(ch: str) -> bool:
    return ch in string.punctuation or unicodedata.category(ch).startswith("P")


def normalize_text(text: str) -> str:
    """Lower-case, NFKC, no punctuation, no articles, single spaces."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if _is_punctuation(ch) else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def text_tokens(text: str) -> list[str]:
    return normalize_text(text).split()


def token_f1(prediction: str, reference: str) -> float:
    """Normalised token-level F1 of ``prediction`` against ``reference`` (in [0, 1])."""
    return _f1(text_tokens(prediction), text_tokens(reference))


def _f1(pred: list[str], ref: list[str]) -> float:
    if not pred or not ref:
        return float(pred == ref)
    overlap = sum((Counter(pred) & Counter(ref)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_token_f1(prediction: str, references: Sequence[str] | Iterable[str]) -> float:
    """The best :func:`token_f1` over several references (JFLEG has four per sentence)."""
    refs = list(references)
    if not refs:
        raise ValueError("best_token_f1 needs at least one reference")
    pred = text_tokens(prediction)  # once, not once per reference
    return max(_f1(pred, text_tokens(r)) for r in refs)


def best_exact_match(prediction: str, references: Sequence[str] | Iterable[str]) -> float:
    """1.0 when ``prediction`` equals any reference after :func:`normalize_text`, else 0.0."""
    refs = list(references)
    if not refs:
        raise ValueError("best_exact_match needs at least one reference")
    pred = normalize_text(prediction)
    return float(any(pred == normalize_text(r) for r in refs))
