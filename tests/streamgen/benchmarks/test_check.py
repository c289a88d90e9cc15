"""`python -m streamgen.benchmarks check` is honest: exit 0 only when every reference passes except
the ones the benchmark's YAML declares (options.known_failures), and never with a sandbox `error`."""

from __future__ import annotations

import dataclasses

import pytest

from streamgen.benchmarks import Example, load_benchmark
from streamgen.benchmarks.__main__ import main
from streamgen.benchmarks.check import RERUNS, check_answers, reference_sample
from streamgen.config import ConfigError, benchmark_config, default_data_dir

pytestmark = pytest.mark.skipif(not default_data_dir().is_dir(), reason="no benchmark data")
FAILING = "```python\nraise SystemExit(1)\n```"


def _humaneval(**options: object):  # type: ignore[no-untyped-def]
    cfg = benchmark_config("humaneval")
    return load_benchmark(dataclasses.replace(cfg, options={**cfg.options, **options}))


def _second_fails(example: Example) -> str:
    return FAILING if example.example_id == "HumanEval/1" else example.reference


def test_an_undeclared_failure_is_not_ok_and_a_declared_one_is() -> None:
    plain = _humaneval()
    examples = plain.examples(limit=2)
    report = check_answers(plain, examples, _second_fails)
    assert (report.passed, report.statuses) == (1, {"passed": 1, "failed": 1})
    assert [f.example_id for f in report.unexpected] == ["HumanEval/1"] and not report.ok
    declared = _humaneval(known_failures={"HumanEval/1": "broken on purpose"})
    report = check_answers(declared, examples, _second_fails)
    assert report.passed == 1 and report.unexpected == () and report.ok
    assert "1 known failures" in report.line() and report.line().endswith("OK")


def test_a_sandbox_that_cannot_start_is_never_ok() -> None:
    broken = _humaneval(python="/bin/false", known_failures={"HumanEval/0": "declared, yet an error"})
    report = check_answers(broken, broken.examples(limit=2), lambda e: e.reference)
    assert report.statuses == {"error": 2} and len(report.unexpected) == 2 and not report.ok


def test_cli_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "humaneval", "--limit", "2", "--workers", "1"]) == 0
    assert "humaneval: 2/2 pass" in capsys.readouterr().out
    assert main(["check", "humaneval", "options.python=/bin/false", "--limit", "2", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "0/2 pass (error 2; 0 known failures)" in out and "NOT OK" in out
    assert main(["check", "humaneval", "--limit", "2", "--expect", "3"]) == 1  # the floor still holds


def test_known_failures_must_map_ids_to_reasons() -> None:
    bench = _humaneval(known_failures=["HumanEval/1"])
    with pytest.raises(ConfigError, match="known_failures must map example ids"):
        check_answers(bench, bench.examples(limit=1), lambda e: e.reference)


def test_an_unusable_sandbox_backend_is_a_problem_up_front() -> None:
    """A grid validates benchmarks before any model loads: a configured backend that does not
    work here is named then, not discovered as failing shards."""
    problems = load_benchmark(benchmark_config("humaneval", ["options.sandbox_backend=docker"])).problems()
    assert len(problems) == 1 and "options.sandbox_backend='docker' does not work here" in problems[0]
    assert load_benchmark(benchmark_config("humaneval", ["options.sandbox_backend=rlimit-only"])).problems() == []


class _LoadedOnce:
    """The real HumanEval scorer, except that the first (parallel) batch sees HumanEval/1 fail, as a
    timing test can under load; every later call scores what it is given. Records each call's ids."""

    def __init__(self, bench, fail_in_batch: bool = True) -> None:  # type: ignore[no-untyped-def]
        self.bench, self.cfg, self.calls, self.fail_in_batch = bench, bench.cfg, [], fail_in_batch

    def score_many(self, examples, answers, *, workers=1):  # type: ignore[no-untyped-def]
        self.calls.append([e.example_id for e in examples])
        if len(self.calls) == 1 and self.fail_in_batch:
            answers = [FAILING if e.example_id == "HumanEval/1" else a for e, a in zip(examples, answers, strict=True)]
        return self.bench.score_many(examples, answers, workers=workers)


def test_a_load_sensitive_failure_is_rerun_alone_and_counts_when_it_passes() -> None:
    bench = _humaneval(load_sensitive={"HumanEval/1": "times itself"})
    examples = bench.examples(limit=3)
    loaded = _LoadedOnce(bench)
    report = check_answers(loaded, examples, lambda e: e.reference)  # type: ignore[arg-type]
    assert loaded.calls == [["HumanEval/0", "HumanEval/1", "HumanEval/2"], ["HumanEval/1"]]
    assert (report.passed, report.failures, report.reruns) == (3, (), {"HumanEval/1": 1})
    assert report.ok and "1 passed on a rerun alone" in report.line()


def test_a_load_sensitive_example_that_always_fails_is_a_failure_after_every_rerun() -> None:
    bench = _humaneval(load_sensitive={"HumanEval/1": "times itself"})
    loaded = _LoadedOnce(bench, fail_in_batch=False)
    report = check_answers(loaded, bench.examples(limit=3), _second_fails)  # type: ignore[arg-type]
    assert loaded.calls[1:] == [["HumanEval/1"]] * RERUNS
    assert [f.example_id for f in report.unexpected] == ["HumanEval/1"] and report.reruns == {}


def test_an_undeclared_failure_is_never_rerun() -> None:
    bench = _humaneval()
    loaded = _LoadedOnce(bench)
    report = check_answers(loaded, bench.examples(limit=3), lambda e: e.reference)  # type: ignore[arg-type]
    assert len(loaded.calls) == 1 and [f.example_id for f in report.unexpected] == ["HumanEval/1"]


def test_load_sensitive_must_map_ids_to_reasons() -> None:
    bench = _humaneval(load_sensitive=["HumanEval/1"])
    with pytest.raises(ConfigError, match="load_sensitive must map example ids"):
        check_answers(bench, bench.examples(limit=1), lambda e: e.reference)


def test_a_reference_sample_takes_every_kth_and_every_declared_failure() -> None:
    bench = _humaneval(known_failures={"HumanEval/7": "declared", "HumanEval/10": "declared"})
    examples = bench.examples(limit=12)
    sample = reference_sample(bench, examples, 5)
    # every 5th in data order (0, 5, 10) and the declared ones not among them (7)
    assert [e.example_id for e in sample] == ["HumanEval/0", "HumanEval/5", "HumanEval/7", "HumanEval/10"]
    assert reference_sample(bench, examples, 1) == examples
    with pytest.raises(ValueError, match="every=0"):
        reference_sample(bench, examples, 0)


def test_the_nightly_sweep_checks_every_reference_not_a_sample(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """workflows/nightly.py's reference stage runs the whole of each benchmark the test run samples:
    here HumanEval stands in for DS-1000 (the same code, 164 references in seconds)."""
    from streamgen.benchmarks import check
    from workflows import nightly

    monkeypatch.setattr(check, "SAMPLED_IN_TESTS", {"humaneval": 5})
    assert nightly.reference_sweeps() is True
    line = capsys.readouterr().out.strip()
    assert line.startswith("reference sweep: humaneval: 164/164 pass") and line.endswith("OK")
    # a benchmark whose interpreter is missing is a configuration error, never a pass
    cfg = benchmark_config("ds1000")
    monkeypatch.setattr(check, "SAMPLED_IN_TESTS", {"ds1000": 5})
    monkeypatch.setattr("streamgen.config.benchmark_config", lambda name: dataclasses.replace(
        cfg, options={**cfg.options, "python": "/nonexistent/python"}))
    with pytest.raises(ConfigError, match="reference sweep of ds1000"):
        nightly.reference_sweeps()
