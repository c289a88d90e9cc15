"""Typos corrected after a delay: the text states a typist sends, which need not extend each other.

Without corrections the text sent at step i is prefix i (segments 1..i). A real typist at
granularity word or chars often has a typo on screen that a later keystroke removes. The model
(:class:`streamgen.config.CorrectionsConfig`; docs/typists.md, "Corrections"):

- each typed character ``p`` of the final request (whitespace and pasted code blocks excepted) is
  mistyped with probability ``typo_rate``: a wrong letter stands at ``p`` instead;
- the typist types ``correction_delay_chars`` (``d``) more characters, then notices, backspaces to
  ``p`` and retypes: the typo is gone once ``p + d + 1`` characters of the request are typed
  (``fixed_at``), or before submitting when the request ends first. Retyped characters are exact;
  no new typo is drawn while one is on screen (the characters it covers are typed exactly);
- a correction costs ``2 · (fixed_at − p)`` extra keystrokes (that many backspaces and as many
  retyped characters): ``correction_keys``, counted on the step in which the correction happens.

State i is the screen when the typist has typed through the end of segment i: prefix i with every
typo still on screen (``p < len(prefix i) < fixed_at``) in place of its character. The last state is
the request itself. Randomness: ``numpy.random.default_rng([seed, 2, key_hash(example id)])``, one
uniform and one letter draw per character, so a request's typos depend only on (seed, its id, its text).
"""

from __future__ import annotations

import dataclasses
import hashlib
import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streamgen.config import ConfigError, CorrectionsConfig, validate_corrections
from streamgen.requests.request import StreamRequest
from streamgen.requests.segment import code_block_spans

__all__ = ["Typo", "TypedStates", "state_at", "typed_states", "typos", "with_corrections"]

_LETTERS = string.ascii_lowercase


@dataclass(frozen=True)
class Typo:
    """One mistyped character: ``wrong`` stands at ``position`` while ``position < typed < fixed_at``."""

    position: int  # character index in the final request
    wrong: str
    fixed_at: int  # characters of the request typed when it is corrected

    @property
    def correction_keys(self) -> int:
        """Backspaces to the typo and the characters retyped after them."""
        return 2 * (self.fixed_at - self.position)


@dataclass(frozen=True)
class TypedStates:
    """The text sent at each step (``states[-1]`` is the request) and each step's correction keystrokes."""

    states: tuple[str, ...]
    correction_keys: tuple[int, ...]
    typos: tuple[Typo, ...]


def _key_hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")


def _pasted(text: str) -> np.ndarray:
    mask = np.zeros(len(text), bool)
    for start, end in code_block_spans(text):
        mask[start:end] = True
    return mask


def typos(text: str, cfg: CorrectionsConfig, key: str) -> tuple[Typo, ...]:
    """Where ``text`` is mistyped under ``cfg`` for the request named ``key`` (its example id)."""
    if problems := validate_corrections(cfg):
        raise ConfigError(problems, "bad corrections settings")
    rng = np.random.default_rng([cfg.seed, 2, _key_hash(key)])
    draws, letters = rng.random(len(text)), rng.integers(0, len(_LETTERS) - 1, len(text))
    pasted, out, clear_from = _pasted(text), [], 0
    for p, ch in enumerate(text):
        if p < clear_from or ch.isspace() or pasted[p] or draws[p] >= cfg.typo_rate:
            continue
        others = _LETTERS.replace(ch.lower(), "")  # 25 or 26 letters: never the character itself
        fixed_at = min(p + cfg.correction_delay_chars + 1, len(text))
        out.append(Typo(p, others[int(letters[p]) % len(others)], fixed_at))
        clear_from = fixed_at
    return tuple(out)


def state_at(text: str, typos_: Sequence[Typo], typed: int) -> str:
    """The screen after ``typed`` characters of ``text``: its prefix with the typos still on it."""
    chars = list(text[:typed])
    for t in typos_:
        if t.position < typed < t.fixed_at:
            chars[t.position] = t.wrong
    return "".join(chars)


def typed_states(segments: Sequence[str], cfg: CorrectionsConfig, key: str) -> TypedStates:
    """The state sent at each step (after segment i is typed) and each step's correction keystrokes."""
    text = "".join(segments)
    found = typos(text, cfg, key)
    ends = np.cumsum([len(s) for s in segments]).tolist()
    states = tuple(state_at(text, found, b) for b in ends[:-1]) + (text,)  # submitting corrects the rest
    keys = tuple(sum(t.correction_keys for t in found if before < t.fixed_at <= b)  # fixed_at ≤ len(text)
                 for before, b in zip([0, *ends[:-1]], ends, strict=True))
    return TypedStates(states, keys, found)



def with_corrections(request: StreamRequest, cfg: CorrectionsConfig | None) -> StreamRequest:
    """``request`` typed with ``cfg``'s typos (keyed by its example id); itself when corrections are off."""
    if cfg is None or not cfg.enabled:
        return request
    typed = typed_states(request.segments, cfg, request.example_id)
    return dataclasses.replace(request, states=typed.states, correction_keys=typed.correction_keys)
