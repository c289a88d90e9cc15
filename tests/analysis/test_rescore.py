"""``python -m analysis.rescore``: stored answers re-scored with a changed scorer, no decoding.

The directory holds real benchmarks' rows (CoEdIT scored by F1, MBPP in the real sandbox), scored
at write time by today's scorers. A test-only scorer replaces CoEdIT's (a version bump and exact match
instead of F1); the rescore must re-score exactly the CoEdIT rows, the analysis must count each
(cell, example) once with the newest score, and the report must list the re-scored rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

import analysis.rescore as rescore_mod
import streamgen.benchmarks as benchmarks_pkg
from analysis.report import write_report
from analysis.rescore import RescoreConfig, parse_config, rescore
from analysis.tables import build_tables
from streamgen.acceptance_rules import Greedy
from streamgen.benchmarks import Example, Score, load_benchmark
from streamgen.benchmarks.base import score_columns
from streamgen.benchmarks.data_manifest import versioned
from streamgen.config import ConfigError, benchmark_config, model_config, resolve_data_dir
from streamgen.results.cells import Cell, settings_json
from streamgen.results.records import PairRecord, RunRecord, to_table
from tests.support.analysis_fixtures import pair_record, run_record

WRONG_CODE = "```python\ndef nothing():\n    return None\n```"
SHARDS = {"coedit": ("c1", "c2"), "mbpp": ("m1", "m1")}  # two CoEdIT shards (resume), one MBPP shard


class Exact:
    """A changed CoEdIT scorer: exact match (after strip) with the reference, under a new version."""

    def __init__(self, inner: Any, tag: str = "exact:1") -> None:
        self.inner, self.tag = inner, tag

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def scorer_version(self) -> str:
        return f"{self.inner.scorer_version}+{self.tag}"

    def score_many(self, examples: Sequence[Example], answers: Sequence[str], *, workers: int = 1) -> list[Score]:
        return [Score(exact(e, a), "exact") for e, a in zip(examples, answers, strict=True)]


def exact(example: Example, answer: str) -> float:
    return float(answer.strip() == example.reference.strip())


ORIGINAL = benchmarks_pkg.BUILDERS


def use_exact_coedit(monkeypatch: pytest.MonkeyPatch, tag: str = "exact:1") -> None:
    builders = dict(ORIGINAL)
    inner = ORIGINAL["coedit"]
    builders["coedit"] = lambda cfg: Exact(inner(cfg), tag)
    monkeypatch.setattr(benchmarks_pkg, "BUILDERS", MappingProxyType(builders))


def _answers(name: str, examples: list[Example]) -> list[tuple[str, str]]:
    """(base, stream) answers per example: CoEdIT a reference and an F1-close edit; MBPP a pass and a fail."""
    if name == "coedit":
        return [(examples[0].reference, examples[0].reference + " Thanks"), (examples[1].reference + " ok",
                                                                             examples[1].reference)]
    return [(examples[0].reference, WRONG_CODE), (WRONG_CODE, examples[1].reference)]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The written directory's rows and examples (scored by today's scorers at write time)."""
    rows: list[PairRecord] = []
    examples: dict[str, list[Example]] = {}
    recorded: dict[str, Any] = {}
    for name in ("coedit", "mbpp"):
        cfg = versioned(benchmark_config(name), resolve_data_dir(None))  # as the grid runs it
        recorded[name] = dataclasses.asdict(cfg)
        bench = load_benchmark(cfg)
        examples[name] = bench.examples(limit=2)
        cell = Cell(model_config("tiny-llama"), cfg, Greedy(), None, 16)
        answers = _answers(name, examples[name])
        scores = bench.score_many([e for e in examples[name] for _ in (0, 1)], [a for p in answers for a in p])
        for i, (ex, (base, stream)) in enumerate(zip(examples[name], answers, strict=True)):
            rows.append(pair_record(
                run_id="20261201T000000Z-aaaaaa", shard_id=SHARDS[name][i], cell_id=cell.cell_id, benchmark=name,
                benchmark_version=cfg.version, example_id=ex.example_id, base_answer=base, stream_answer=stream,
                cell_fingerprint=cell.fingerprint, cell_settings=settings_json(cell.settings()),
                **score_columns(scores[2 * i], scores[2 * i + 1], bench.scorer_version)))
    run_yaml = OmegaConf.to_yaml(OmegaConf.create({"benchmarks": recorded}))  # like GridPlan.resolved_yaml
    return {"rows": rows, "examples": examples, "run_yaml": run_yaml}


@pytest.fixture
def results(tmp_path: Path, stored: dict[str, Any]) -> Path:
    for r in stored["rows"]:
        path = tmp_path / "pairs" / f"model={r.model}" / f"benchmark={r.benchmark}" / f"{r.shard_id}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        old = pq.read_table(path).to_pylist() if path.exists() else []
        pq.write_table(to_table([PairRecord(**o) for o in old] + [r], PairRecord), path)
    run = dataclasses.replace(run_record("20261201T000000Z-aaaaaa"), config_yaml=stored["run_yaml"])
    (tmp_path / "runs").mkdir()
    pq.write_table(to_table([run], RunRecord), tmp_path / "runs" / "r.parquet")
    return tmp_path


def score_rows(results: Path) -> list[dict[str, Any]]:
    return [r for p in sorted((results / "scores").rglob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def cell_quality(results: Path) -> dict[tuple[str, str | None], tuple[float, float]]:
    cells = build_tables(results, ["cells"])["cells"].to_pylist()
    return {(r["benchmark"], r["settings_tag"]): (r["base_quality_pct"], r["stream_quality_pct"])
            for r in cells if r["benchmark"] is not None}


def test_nothing_changed_rescores_nothing(results: Path) -> None:
    summary = rescore(results, RescoreConfig(workers=1))
    assert (summary.scored_rows, summary.rescored, summary.current, summary.skipped) == (4, 0, 4, 0)
    assert not (results / "scores").exists()


def test_a_changed_scorer_rescores_exactly_its_rows(results: Path, stored: dict[str, Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    before = cell_quality(results)
    use_exact_coedit(monkeypatch)
    summary = rescore(results, RescoreConfig(workers=1))
    coedit = [r for r in stored["rows"] if r.benchmark == "coedit"]
    written = score_rows(results)
    assert summary.rescored == 2 and summary.current == 2 and summary.by_benchmark == {"coedit": 2}
    assert {(r["run_id"], r["shard_id"], r["example_id"]) for r in written} == {
        (r.run_id, r.shard_id, r.example_id) for r in coedit}
    by_id = {e.example_id: e for e in stored["examples"]["coedit"]}
    want = {r.example_id: (exact(by_id[r.example_id], r.base_answer), exact(by_id[r.example_id], r.stream_answer))
            for r in coedit}
    assert {r["example_id"]: (r["base_quality"], r["stream_quality"]) for r in written} == want
    assert {r["scorer_version"] for r in written} == {"coedit:1+f1:1+exact:1"}

    after = cell_quality(results)
    assert after[("mbpp", None)] == before[("mbpp", None)]  # untouched: no re-score, same numbers
    mean = [100 * sum(q[i] for q in want.values()) / len(want) for i in (0, 1)]
    assert after[("coedit", None)] == pytest.approx(tuple(mean))
    assert after[("coedit", None)] != before[("coedit", None)]  # F1 gave other numbers (the test means something)

    rescored = build_tables(results, ["rescored"])["rescored"].to_pylist()
    changed = sorted(r.example_id for r in coedit
                     if (r.base_quality, r.stream_quality) != want[r.example_id])
    assert [(r["benchmark"], r["scorer_version_before"], r["n_rescored"], r["n_changed"]) for r in rescored] == [
        ("coedit", "coedit:1+f1:1", 2, len(changed))]
    assert rescored[0]["examples_changed"] == " ".join(changed)
    report = write_report(results, with_figures=False)
    text = report.markdown_path.read_text()
    assert "## Re-scored rows" in text and "coedit:1+f1:1+exact:1" in text

    again = rescore(results, RescoreConfig(workers=1))  # now everything is current
    assert (again.rescored, again.current) == (0, 4)


def test_the_newest_rescore_wins(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_exact_coedit(monkeypatch, "exact:1")
    rescore(results, RescoreConfig(workers=1))
    use_exact_coedit(monkeypatch, "exact:2")
    second = rescore(results, RescoreConfig(workers=1))
    assert second.rescored == 2  # the version changed again
    cells = build_tables(results, ["cells", "rescored"])
    assert {r["scorer_version"] for r in cells["rescored"].to_pylist()} == {"coedit:1+f1:1+exact:2"}
    assert all(r["n_total"] == 2 for r in cells["cells"].to_pylist() if r["benchmark"] is not None)


def test_an_interrupted_rescore_is_told_apart_then_resumed(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_exact_coedit(monkeypatch)
    real, calls = rescore_mod.write_parquet_atomic, []

    def dies_on_second(table: Any, path: Any) -> Any:
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(table, path)

    monkeypatch.setattr(rescore_mod, "write_parquet_atomic", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        rescore(results, RescoreConfig(workers=1))
    assert len(score_rows(results)) == 1  # the first CoEdIT shard (one example) is on disk
    # one cell, two scorer versions: two separately labelled rows, never one statistic
    tags = sorted(t for (b, t) in cell_quality(results) if b == "coedit")
    assert tags == ["scorer coedit:1+f1:1", "scorer coedit:1+f1:1+exact:1"]
    monkeypatch.setattr(rescore_mod, "write_parquet_atomic", real)
    resumed = rescore(results, RescoreConfig(workers=1))
    assert (resumed.rescored, resumed.current) == (1, 3)  # only the shard that was not written
    assert [t for (b, t) in cell_quality(results) if b == "coedit"] == [None]


def test_force_rescores_code_in_the_sandbox(results: Path, stored: dict[str, Any]) -> None:
    summary = rescore(results, parse_config(["benchmarks=[mbpp]", "force=true", "workers=2"]))
    written = score_rows(results)
    mbpp = {r.example_id: r for r in stored["rows"] if r.benchmark == "mbpp"}
    assert summary.rescored == 2 and {r["benchmark"] for r in written} == {"mbpp"}
    assert {r["example_id"]: (r["base_score_status"], r["stream_score_status"]) for r in written} == {
        "mbpp/1": ("passed", "failed"), "mbpp/2": ("failed", "passed")}
    assert all(r["sandbox_backend"] for r in written)
    assert {k: (v.base_score_status, v.stream_score_status) for k, v in mbpp.items()} == {
        "mbpp/1": ("passed", "failed"), "mbpp/2": ("failed", "passed")}


def test_changed_data_or_settings_are_skipped_with_the_reason(results: Path, stored: dict[str, Any],
                                                              caplog: pytest.LogCaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    real = rescore_mod.benchmark_config
    monkeypatch.setattr(rescore_mod, "benchmark_config",  # today's CoEdIT YAML at another version
                        lambda name: dataclasses.replace(real(name), version="2") if name == "coedit" else real(name))
    summary = rescore(results, RescoreConfig(workers=1, force=True))
    assert summary.skipped == 2 and summary.by_benchmark == {"mbpp": 2}
    recorded = next(r.benchmark_version for r in stored["rows"] if r.benchmark == "coedit")
    assert f"data version {recorded!r} at decoding, '2+{recorded.split('+')[1]}' now" in caplog.text


def test_rows_without_a_run_record_use_todays_config_if_their_settings_match(results: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for p in (results / "runs").iterdir():
        p.unlink()
    use_exact_coedit(monkeypatch)
    assert rescore(results, RescoreConfig(workers=1)).rescored == 2
    real = rescore_mod.benchmark_config
    monkeypatch.setattr(rescore_mod, "benchmark_config",
                        lambda name: real(name, ["timeout_s=1.0"]) if name == "mbpp" else real(name))
    forced = rescore(results, RescoreConfig(workers=1, force=True))
    assert forced.skipped == 2 and forced.by_benchmark == {"coedit": 2}  # mbpp: timeout_s differs from its rows


def test_a_bad_setting_is_one_clear_error(results: Path) -> None:
    with pytest.raises(ConfigError, match="benchmark"):
        parse_config(["benchmark=[mbpp]"])
    with pytest.raises(ConfigError, match=r"holds no rows of \['humaneval'\]; it holds \['coedit', 'mbpp'\]"):
        rescore(results, RescoreConfig(benchmarks=["humaneval", "mbpp"]))
