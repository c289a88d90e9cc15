"""The live stream run: segments arrive on a clock, and drafting follows a policy (docs/design.md, 'Vocabulary').

Where :func:`streamgen.stream.run_stream` replays prefixes 1..n back to back, :func:`run_stream_live`
types the request on ``clock`` under a typing model: it sleeps until the step the policy picks
may start, runs it, and asks the policy again once the device is free — skipping stale prefixes
exactly as :func:`streamgen.timing.policies.evaluate` does post hoc. The clock and sleep are injected
(real time by default), so a test can drive the live run on a fake clock and check it against the
post-hoc figures exactly.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from streamgen.acceptance_rules import AcceptanceRule
from streamgen.config import LIVE_POLICIES, ConfigError, TypingConfig
from streamgen.decoding.base import Decoder, StepResult
from streamgen.requests.request import StreamRequest
from streamgen.timing.policies import Policy
from streamgen.timing.timeline import TypingModel, arrival_times

__all__ = ["LiveSettings", "StepTiming", "run_stream_live"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveSettings:
    """How a live stream run types and drafts."""

    policy: Policy
    typing: TypingModel

    def __post_init__(self) -> None:
        if self.policy.name not in LIVE_POLICIES:
            raise ConfigError([f"live policy {self.policy.name!r}: live runs support {LIVE_POLICIES}"], "bad policy")

    @classmethod
    def from_config(cls, cfg: TypingConfig) -> LiveSettings | None:
        """The grid's live settings, or None when ``live_policy`` is unset (the replay of today)."""
        if cfg.live_policy is None:
            return None
        (rate,) = cfg.chars_per_s  # validate_typing guarantees one rate for a live grid
        return cls(Policy(cfg.live_policy, k=cfg.every_k),
                   TypingModel(rate, cfg.sentence_pause_s, cfg.paste_code))


@dataclass(frozen=True)
class StepTiming:
    """When one live step ran, in seconds after the first keystroke."""

    step: int  # 1-based prefix index
    arrival_s: float
    start_s: float


@dataclass(frozen=True)
class LiveStream:
    steps: tuple[StepResult, ...]
    timing: tuple[StepTiming, ...]


def run_stream_live(decoder: Decoder, request: StreamRequest, rule: AcceptanceRule, live: LiveSettings, *,
                    clock: Callable[[], float] = time.perf_counter,
                    sleep: Callable[[float], None] = time.sleep) -> LiveStream:
    """Type ``request`` on ``clock``; draft the prefixes ``live.policy`` picks; each verifies the last draft."""
    arrivals = arrival_times(request.segments, live.typing)
    if request.correction_keys:  # a correction's backspaces and retyped characters take typing time (as post hoc)
        arrivals = tuple(a + keys / live.typing.chars_per_s
                         for a, keys in zip(arrivals, itertools.accumulate(request.correction_keys), strict=True))
    n = len(arrivals)
    session = decoder.open_stream()
    steps: list[StepResult] = []
    timing: list[StepTiming] = []
    draft: tuple[int, ...] = ()
    start_clock, last = clock(), 0
    try:
        while last < n:
            decision = live.policy.next_step(last, clock() - start_clock, arrivals)
            ahead = decision.start_s - (clock() - start_clock)
            if ahead > 0:
                sleep(ahead)
            started = clock() - start_clock
            result = session.step(request.messages(decision.step), draft, rule)
            steps.append(result)
            timing.append(StepTiming(decision.step, arrivals[decision.step - 1], started))
            last, draft = decision.step, result.answer.token_ids
    finally:
        session.close()
    log.debug("example %s live: ran steps %s of %d", request.example_id, [t.step for t in timing], n)
    return LiveStream(tuple(steps), tuple(timing))
