"""Wall-clock semantics in every family, with the meter's injected clock and sync (no timed tests).

docs/accounting.md "Timing": a span synchronises the device before each clock read, and the base run's
span and a stream step's span contain the same kinds of work (rendering and tokenising the request,
then the model calls), so residual and base wall clock compare like with like.
"""

from __future__ import annotations

import pytest

from streamgen.acceptance_rules import Greedy
from streamgen.config import model_config
from streamgen.families.registry import load_decoder
from streamgen.stream import StreamRequest

REQ = StreamRequest("t", (), ("Write a function that adds two numbers. ", "Use type hints."))


def instrumented(name: str) -> tuple[object, list[str]]:
    """A decoder whose meter clock, sync, request rendering and model calls append to one event list."""
    d = load_decoder(model_config(name), max_new_tokens=16)
    events: list[str] = []
    ticks = iter(range(10**6))
    d.meter.clock = lambda: (events.append("clock"), float(next(ticks)))[1]
    d.meter.sync = lambda: events.append("sync")
    text = getattr(d, "text", d)
    render = text.render
    text.render = lambda messages: (events.append("render"), render(messages))[1]
    d.model.register_forward_pre_hook(lambda *_: events.append("forward"))
    return d, events


def check_span(events: list[str]) -> None:
    assert events[:2] == ["sync", "clock"] and events[-2:] == ["sync", "clock"]  # the span's two ends
    assert all(events[i - 1] == "sync" for i, e in enumerate(events) if e == "clock")
    assert "render" in events and events.index("render") < events.index("forward")


@pytest.mark.parametrize("family", ["ar", "refusion", "llada", "dgemma"])
def test_base_and_stream_spans_sync_before_every_clock_read_and_hold_the_same_work(family: str) -> None:
    d, events = instrumented(f"scripted-{family}-prefix")
    base = d.generate(REQ.messages())
    check_span(events)
    base_kinds = set(events)
    session, draft = d.open_stream(), ()
    for i in (1, 2):
        events.clear()
        step = session.step(REQ.messages(i), draft, Greedy())
        check_span(events)
        assert set(events) == base_kinds == {"sync", "clock", "render", "forward"}
        draft = step.answer.token_ids
    # the fake clock ticks once per read: a span's wall time counts the reads inside it
    assert base.wall_s == 2 * base.forwards + 1 and step.answer.wall_s == 2 * step.answer.forwards + 1
