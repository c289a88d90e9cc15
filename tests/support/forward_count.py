"""Counting real model calls independently of ForwardMeter: a forward pre-hook on the torch module."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class CallCount:
    calls: int = 0


@contextmanager
def counting_calls(module: Any) -> Iterator[CallCount]:
    """Count every call of ``module`` (its ``forward`` pre-hook fires once per call, whatever the
    decoder's meter says) while the block runs."""
    count = CallCount()

    def hook(_module: Any, _args: Any) -> None:
        count.calls += 1

    handle = module.register_forward_pre_hook(hook)
    try:
        yield count
    finally:
        handle.remove()


def predicted_forwards_executed(pairs: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]], *,
                                share: bool) -> int:
    """The model calls a run's rows imply, by the rule of docs/accounting.md ("Shared work"), written
    the simple way (a reference for ``streamgen.shared_example``, which computes it another way).

    Without sharing every cell pays its base run and all its steps. With sharing, per example of a unit
    (LLaDA/Dream: both verifier modes in one unit): the base run once; a step once per distinct path to
    it (the same verifier mode from step 2 on, and the same (accepted, forwards, answer) at that step
    and every earlier one); and for LLaDA/Dream a step that keeps nothing pays its verify forward only, its decode being
    the base decode of its prefix, paid once per prefix (the last prefix's by the base run)."""
    if not share:
        return sum(p["base_forwards"] for p in pairs) + sum(s["forwards"] for s in steps)
    family = {p["model"]: p["family"] for p in pairs}

    def unit(row: dict[str, Any]) -> tuple:
        mode = None if family[row["model"]] == "bidirectional" else row["verifier_mode"]
        return row["model"], row["benchmark"], row["example_id"], mode

    bases = {unit(p): (p["base_forwards"], p["n_segments"]) for p in pairs}
    paths: dict[tuple, list[dict[str, Any]]] = {}
    for s in sorted(steps, key=lambda s: s["step"]):
        cell = (unit(s), s["acceptance"], s["tau"], s.get("tie_guard"), s["verifier_mode"])
        paths.setdefault(cell, []).append(s)
    nodes: dict[tuple, dict[str, Any]] = {}
    for (u, *_), path in paths.items():
        history: tuple = ()
        for s in path:  # the step's own outcome is in its key: rules that keep different runs fork there
            history += ((s["accepted_tokens"], s["forwards"], s["draft_fingerprint"]),)
            nodes.setdefault((u, s["step"], s["verifier_mode"] if s["step"] > 1 else None, history), s)
    executed = sum(b for b, _ in bases.values())
    decodes: dict[tuple, int] = {(u, n): b for u, (b, n) in bases.items() if family[u[0]] == "bidirectional"}
    for (u, step, _, _), s in nodes.items():
        if family[u[0]] != "bidirectional" or s["accepted_tokens"] > 0:
            executed += s["forwards"]
            continue
        verify = 1 if s["draft_tokens_in"] else 0
        if (u, step) not in decodes:
            decodes[(u, step)] = s["forwards"] - verify
            executed += s["forwards"] - verify
        assert decodes[(u, step)] == s["forwards"] - verify, (u, step)  # one prefix, one decode
        executed += verify
    return executed
