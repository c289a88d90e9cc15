"""A typist population: per-user speed, per-keystroke intervals and pauses, seeded (docs/typists.md).

The fixed-rate typist (:class:`streamgen.timing.timeline.TypingModel`) types every request at one rate. A
:class:`Population` draws ``users`` typists from a :class:`Preset` fitted to a published keystroke study:

- **speed**: user u's mean speed ``wpm_u`` is log-normal with the preset's mean and SD (matched by
  moments: ``σ² = ln(1 + sd²/mean²)``, ``μ = ln(mean) − σ²/2``); ``1 WPM = 5 characters per minute``;
- **inter-key intervals**: each typed character of a request takes a log-normal interval with mean
  ``60 / (5 · wpm_u)`` seconds and coefficient of variation ``iki_cv``;
- **pauses**: after every sentence end inside the request a log-normal pause with mean
  ``sentence_pause_s``, and after every paragraph break ``paragraph_pause_s`` more (a paragraph break is
  also a sentence end), both with coefficient of variation ``pause_cv``;
- **pasted code** as the fixed-rate typist: a code block's characters take no time (``paste_code``).

Segment i then arrives at the sum of the intervals of its prefix's typed characters plus the pauses of
the boundaries strictly inside it — with ``iki_cv = pause_cv = 0`` exactly the fixed-rate formula at the
user's rate (:meth:`streamgen.timing.timeline.TypingModel.arrival`). The output is one arrival time per
segment, the same thing the fixed-rate timeline gives, so policies, the post-hoc evaluation and the
K-user simulation consume it unchanged.

Randomness: speeds come from ``numpy.random.default_rng([seed, 0])``; user u's keystrokes on a request
from ``default_rng([seed, 1, key_hash])`` where ``key_hash`` hashes the request's key (its example id),
row u of a (users × draws) matrix. So a figure reproduces from (preset, users, seed); the same user
types the same request identically in every cell (paired comparisons across models and policies);
and user u's draws do not depend on how many users or which other requests there are.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streamgen.config import TYPIST_PRESETS, ConfigError
from streamgen.timing.timeline import PrefixCounts

__all__ = ["CHARS_PER_WORD", "PRESETS", "LogNormal", "Population", "Preset", "chars_per_s", "population"]

CHARS_PER_WORD = 5  # the text-entry convention: 1 WPM = 5 characters per minute


def chars_per_s(wpm: float | np.ndarray) -> np.ndarray:
    """Words per minute → characters per second (``wpm · 5 / 60``), as an array."""
    return np.asarray(wpm, float) * CHARS_PER_WORD / 60.0


@dataclass(frozen=True)
class LogNormal:
    """A log-normal with the given mean and standard deviation (``sd = 0``: the constant ``mean``)."""

    mean: float
    sd: float

    @property
    def sigma(self) -> float:
        return math.sqrt(math.log1p((self.sd / self.mean) ** 2))

    @property
    def mu(self) -> float:
        return math.log(self.mean) - self.sigma ** 2 / 2

    def at(self, z: np.ndarray | float) -> np.ndarray:
        """The value at standard-normal draws ``z`` (the quantile function at ``Φ(z)``)."""
        return np.exp(self.mu + self.sigma * np.asarray(z, float))


@dataclass(frozen=True)
class Preset:
    """A population's parameters; docs/typists.md gives each figure's source or marks it an assumption."""

    name: str
    mean_wpm: float  # across users
    sd_wpm: float  # across users
    iki_cv: float  # within a user: SD / mean of one inter-key interval
    sentence_pause_s: float  # mean pause after a sentence end
    paragraph_pause_s: float  # mean extra pause after a paragraph break
    pause_cv: float  # SD / mean of one pause

    def __post_init__(self) -> None:
        bad = [f for f in ("mean_wpm", "sd_wpm", "iki_cv", "sentence_pause_s", "paragraph_pause_s", "pause_cv")
               if not (math.isfinite(getattr(self, f)) and getattr(self, f) >= 0)]
        if bad or self.mean_wpm <= 0:
            raise ConfigError([f"preset {self.name!r}: {', '.join(bad) or 'mean_wpm'} must be finite and ≥ 0 "
                               "(mean_wpm > 0)"], "bad typist preset")

    @property
    def speed(self) -> LogNormal:
        return LogNormal(self.mean_wpm, self.sd_wpm)


# Dhakal et al., CHI 2018 (desktop) and Palin et al., MobileHCI 2019 (mobile); see docs/typists.md for
# what was checked where. The pause figures and the within-user variation are assumptions.
PRESETS: dict[str, Preset] = {
    "desktop": Preset("desktop", mean_wpm=52.0, sd_wpm=20.0, iki_cv=0.5, sentence_pause_s=1.5,
                      paragraph_pause_s=3.0, pause_cv=1.0),
    "mobile": Preset("mobile", mean_wpm=36.2, sd_wpm=36.2 * 20.0 / 52.0, iki_cv=0.5, sentence_pause_s=1.5,
                     paragraph_pause_s=3.0, pause_cv=1.0),
}
assert tuple(PRESETS) == TYPIST_PRESETS  # config validates names against TYPIST_PRESETS


def _key_hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")


@dataclass(frozen=True)
class Population:
    """``users`` typists drawn from ``preset`` with ``seed``."""

    preset: Preset
    users: int
    seed: int = 0
    paste_code: bool = True

    def __post_init__(self) -> None:
        if self.users < 1 or self.seed < 0:
            raise ConfigError([f"a population needs users ≥ 1 and seed ≥ 0, got users={self.users}, "
                               f"seed={self.seed}"], "bad typist population")

    def speeds_wpm(self) -> np.ndarray:
        """Each user's mean speed in words per minute (length ``users``)."""
        z = np.random.default_rng([self.seed, 0]).standard_normal(self.users)
        return self.preset.speed.at(z)

    def arrivals(self, counts: Sequence[PrefixCounts], key: str) -> np.ndarray:
        """Arrival time (s after the first keystroke) of each segment, per user: shape ``(users, n)``.

        ``counts``: :func:`streamgen.timing.timeline.prefix_counts` of the request's segments; ``key``
        names the request (its example id), so a user types it the same way wherever it appears.
        """
        if not counts:
            return np.zeros((self.users, 0))
        typed = np.array([c.prefix_chars - (c.pasted_chars if self.paste_code else 0) for c in counts], np.int64)
        sentences = np.array([c.sentence_ends for c in counts], np.int64)
        paragraphs = np.array([c.paragraph_ends for c in counts], np.int64)
        if np.any(np.diff(typed) < 0) or np.any(np.diff(sentences) < 0) or np.any(np.diff(paragraphs) < 0):
            raise ValueError("prefix counts decrease: pass the counts of prefixes 1..n of one request")
        m, s, p = int(typed[-1]), int(sentences[-1]), int(paragraphs[-1])
        z = np.random.default_rng([self.seed, 1, _key_hash(key)]).standard_normal((self.users, m + s + p))
        mean_iki = 1.0 / chars_per_s(self.speeds_wpm())  # seconds per character, per user
        iki = LogNormal(1.0, self.preset.iki_cv).at(z[:, :m]) * mean_iki[:, None]
        pre = self.preset
        return (_cumulative(iki, typed) + _cumulative(_pauses(z[:, m:m + s], pre.sentence_pause_s, pre.pause_cv), sentences)
                + _cumulative(_pauses(z[:, m + s:], pre.paragraph_pause_s, pre.pause_cv), paragraphs))


def _pauses(z: np.ndarray, mean_s: float, cv: float) -> np.ndarray:
    return np.zeros_like(z) if mean_s == 0 else LogNormal(mean_s, cv * mean_s).at(z)


def _cumulative(intervals: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per row, the sum of the first ``counts[i]`` intervals, for each i."""
    cum = np.concatenate([np.zeros((intervals.shape[0], 1)), np.cumsum(intervals, axis=1)], axis=1)
    return cum[:, counts]


def population(name: str, users: int, seed: int = 0, paste_code: bool = True) -> Population:
    """The population of preset ``name`` (ConfigError naming the presets when it is unknown)."""
    if name not in PRESETS:
        raise ConfigError([f"unknown typist preset {name!r}: use one of {sorted(PRESETS)}"], "bad typist population")
    return Population(PRESETS[name], users, seed, paste_code)
