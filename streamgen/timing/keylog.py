"""Keystroke-log replay: a recorded typist's text states → arrival time of each segment (docs/typists.md).

A keystroke log is JSON Lines, one request per line::

    {"example_id": "coedit/3", "states": [[0.0, "F"], [0.21, "Fi"], ..., [14.9, "Fix the grammar: ..."]]}

``states`` lists ``[t_s, text]`` pairs: ``t_s`` seconds after the first keystroke (non-decreasing), ``text``
the whole request text after that keystroke. The last state's text must equal the request.

Segment i arrives at the time of the earliest state from which on every state's text starts with
prefix i: for a log whose states are all prefixes of the request, the moment prefix i was first
complete; a state that is not a prefix (a typo not yet corrected) does not hold the segments after the
typo, so a prefix-only stream sees segment i when it is in for good. The arrival times feed the
policies, the post-hoc evaluation and the simulation exactly as a typing model's do.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from streamgen.config import ConfigError

__all__ = ["KeyLog", "keylog_line", "read_keylog", "replay_arrivals"]


@dataclass(frozen=True)
class KeyLog:
    """One request's log: text states and when each was reached (seconds after the first keystroke)."""

    example_id: str
    times_s: tuple[float, ...]
    texts: tuple[str, ...]

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise ConfigError(problems, f"bad keystroke log for {self.example_id!r}")

    @property
    def final_text(self) -> str:
        return self.texts[-1]


def _problems(log: KeyLog) -> list[str]:
    if not log.texts or len(log.texts) != len(log.times_s):
        return ["a log needs at least one [t_s, text] state, e.g. \"states\": [[0.0, \"H\"], [0.2, \"Hi\"]]"]
    bad = [t for t in log.times_s if not (math.isfinite(t) and t >= 0)]
    if bad:
        return [f"state times must be finite seconds ≥ 0 after the first keystroke, got {bad[0]!r}"]
    back = next((i for i in range(1, len(log.times_s)) if log.times_s[i] < log.times_s[i - 1]), None)
    if back is not None:
        return [f"state {back} at {log.times_s[back]} s comes before state {back - 1} at {log.times_s[back - 1]} s: "
                "sort the states by time"]
    return []


def read_keylog(path: str | Path) -> dict[str, KeyLog]:
    """Every request's log in a JSONL file, by example id (ConfigError naming the line and the fix)."""
    logs: dict[str, KeyLog] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        log = _parse(line, f"{path}:{number}")
        if log.example_id in logs:
            raise ConfigError([f"{path}:{number}: example {log.example_id!r} is logged twice; keep one line per request"],
                              "bad keystroke log")
        logs[log.example_id] = log
    return logs


def _parse(line: str, where: str) -> KeyLog:
    fix = 'each line must be {"example_id": "...", "states": [[t_s, "text"], ...]} (docs/typists.md)'
    try:
        row = json.loads(line)
        states = row["states"]
        return KeyLog(str(row["example_id"]), tuple(float(t) for t, _ in states), tuple(str(x) for _, x in states))
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, ConfigError):
            raise ConfigError([f"{where}: {p}" for p in exc.problems], "bad keystroke log") from None
        raise ConfigError([f"{where}: {exc.__class__.__name__} {exc}; {fix}"], "bad keystroke log") from None


def replay_arrivals(log: KeyLog, segments: Sequence[str]) -> tuple[float, ...]:
    """Arrival time of each of the request's segments under ``log`` (ConfigError when the log's final
    text is not the request)."""
    request = "".join(segments)
    if log.final_text != request:
        at = next((i for i, (a, b) in enumerate(zip(log.final_text, request, strict=False)) if a != b),
                  min(len(log.final_text), len(request)))
        raise ConfigError([f"the log of {log.example_id!r} ends in a text that is not its request: they differ from "
                           f"character {at} ({log.final_text[at:at + 20]!r} logged, {request[at:at + 20]!r} in the "
                           "request); log the request as the benchmark renders it, or pair the log with its own example"],
                          "keystroke log does not match its request")
    arrivals, end = [], 0
    for seg in segments:
        end += len(seg)
        prefix, i = request[:end], len(log.texts) - 1
        while i > 0 and log.texts[i - 1].startswith(prefix):
            i -= 1
        arrivals.append(log.times_s[i])
    return tuple(arrivals)


def keylog_line(log: KeyLog) -> str:
    """One JSONL line of ``log`` (what :func:`read_keylog` reads back)."""
    return json.dumps({"example_id": log.example_id, "states": [[t, x] for t, x in zip(log.times_s, log.texts,
                                                                                        strict=True)]},
                      ensure_ascii=False)
