"""The forward meter: readings come from running totals, equal to summing the log, without reading it."""

from __future__ import annotations

from itertools import count

from streamgen.decoding.meter import ForwardCall, ForwardMeter, MeterReading


class UnreadableLog(list):
    """A call log that fails if anything iterates over it (a reading must not)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("a reading iterated over the whole call log")


def fake_meter(n: int) -> ForwardMeter:
    ticks = count()
    meter = ForwardMeter(clock=lambda: next(ticks) ** 1.5 * 1.1e-4)  # uneven, inexact float steps
    for i in range(n):
        with meter.call("verify" if i % 3 else "decode", 1 + i % 5):
            pass
    return meter


def summed(calls: list[ForwardCall]) -> MeterReading:
    """The reading by its definition: count, and sums in call order from zero."""
    return MeterReading(len(calls), sum(c.tokens_fed for c in calls), sum(c.wall_s for c in calls))


def test_reading_equals_the_sums_over_the_log_exactly() -> None:
    meter = fake_meter(500)
    assert meter.reading() == summed(meter.calls)  # float equality: the same additions in the same order
    assert meter.reading().tokens_fed == sum(1 + i % 5 for i in range(500))


def test_reading_never_reads_the_log() -> None:
    meter = fake_meter(50)
    expected = summed(meter.calls)
    meter.calls = UnreadableLog(meter.calls)
    assert meter.reading() == expected
    with meter.span() as span, meter.call("decode", 7):
        pass
    assert span.meter.forwards == 1 and span.meter.tokens_fed == 7
    assert meter.reading().forwards == 51


def test_span_is_the_difference_of_the_sums() -> None:
    meter = fake_meter(20)
    with meter.span() as span:
        for i in range(4):
            with meter.call("decode", i):
                pass
    assert span.meter.forwards == 4 and span.meter.tokens_fed == 0 + 1 + 2 + 3
    assert span.meter == summed(meter.calls) - summed(meter.calls[:20])  # what the log-summing meter gave


def test_clearing_the_log_changes_no_reading_and_a_given_log_is_counted() -> None:
    meter = fake_meter(20)
    before = meter.reading()
    meter.calls.clear()
    assert meter.reading() == before and before.forwards == 20
    log = fake_meter(7).calls
    assert ForwardMeter(calls=list(log)).reading() == summed(log)


def test_the_log_keeps_the_latest_calls_and_the_totals_keep_them_all() -> None:
    """The meter's memory stays flat: its log holds at most ``limit`` calls (the older half leaves when
    full), while readings and per-kind totals still count every call."""
    from streamgen.decoding.meter import CallLog

    limit, n = 64, 1000
    meter = ForwardMeter(calls=CallLog(limit=limit))
    ticks = count()
    meter.clock = lambda: float(next(ticks))
    for i in range(n):
        with meter.call("verify" if i % 4 == 0 else "decode", 2):
            pass
    log = meter.calls
    assert isinstance(log, CallLog) and limit // 2 < len(log) <= limit and log.dropped == n - len(log)
    assert meter.reading() == MeterReading(n, 2 * n, float(n))  # each call spans one tick
    assert meter.by_kind["verify"].forwards == n // 4 and meter.by_kind["decode"].forwards == n - n // 4
    assert sum(k.tokens_fed for k in meter.by_kind.values()) == 2 * n
    assert ForwardMeter().calls.limit >= 4096  # the default log: bounded, enough for any one pair's inspection


def test_cuda_actors_decode_deterministically_and_cpu_is_left_alone(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """make_deterministic sets and records what shared work relies on, on CUDA only."""
    import torch

    from streamgen.decoding import numerics

    calls: list[bool] = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda on: calls.append(on))
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    env: dict[str, str] = {}
    assert numerics.make_deterministic("cpu", env) is False and env == {} and calls == []
    assert numerics.make_deterministic("cuda:0", env) is True
    assert env == {"CUBLAS_WORKSPACE_CONFIG": numerics.CUBLAS_WORKSPACE} and calls == [True]
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert '"cublas_workspace_config":":16:8"' in numerics.numerics_record(torch.nn.Linear(2, 2), "cpu").to_json()
