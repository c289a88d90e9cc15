"""The demo's configuration: ``key=value`` arguments of ``python -m streamgen.demo``, validated at once."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from streamgen.config import (
    LIVE_POLICIES,
    load,
    raise_if_problems,
    rule_problems,
    validate_granularity,
)

USAGE = ("usage: python -m streamgen.demo [model=smollm2] [acceptance=greedy|threshold tau=0.9] "
         "[policy=latest|every|every_k] [granularity=sentence|word|chars] [host=127.0.0.1] [port=8765]")


@dataclass(frozen=True)
class DemoConfig:
    """Everything the demo server needs; every field is a ``key=value`` argument."""

    model: str = "smollm2"
    acceptance: str = "greedy"
    tau: float | None = None
    policy: str = "latest"  # streamgen.timing.policies: every | latest | every_k (cap is post hoc only)
    every_k: int = 2
    granularity: str = "sentence"  # streamgen.timing.granularity: sentence | word | chars
    segment_chars: int = 40
    max_new_tokens: int = 128
    device: str = "cpu"
    threads: int = 1  # torch CPU threads
    host: str = "127.0.0.1"  # loopback only unless told otherwise
    port: int = 8765  # 0: any free port
    idle_timeout_s: float = 300.0  # a tab with no update for this long is released
    max_updates_per_s: float = 20.0  # text updates per second per tab beyond this are refused (flood)
    max_chars: int = 20000  # a request longer than this is refused before it reaches the tokenizer
    max_sessions: int = 32


def validate(cfg: DemoConfig) -> list[str]:
    """Every problem with ``cfg``, each naming the fix."""
    p = rule_problems(cfg.acceptance, {"tau": cfg.tau})
    if cfg.policy not in LIVE_POLICIES:
        p.append(f"policy={cfg.policy!r}: the live page supports {LIVE_POLICIES}")
    if cfg.every_k < 1:
        p.append(f"every_k={cfg.every_k} must be ≥ 1")
    p += validate_granularity(cfg.granularity, cfg.segment_chars)
    if cfg.max_new_tokens < 1:
        p.append(f"max_new_tokens={cfg.max_new_tokens} must be ≥ 1")
    if not 0 <= cfg.port <= 65535:
        p.append(f"port={cfg.port} must be in 0..65535 (0: any free port)")
    for name in ("idle_timeout_s", "max_updates_per_s"):
        value = getattr(cfg, name)
        if not (math.isfinite(value) and value > 0):
            p.append(f"{name}={value} must be a positive number")
    for name in ("max_chars", "max_sessions", "threads"):
        if getattr(cfg, name) < 1:
            p.append(f"{name}={getattr(cfg, name)} must be ≥ 1")
    return p


def parse_args(argv: Sequence[str]) -> DemoConfig:
    """``key=value`` arguments → a validated :class:`DemoConfig` (one ConfigError listing every problem)."""
    cfg = load(DemoConfig, overrides=list(argv))
    raise_if_problems(validate(cfg), "bad arguments")
    return cfg
