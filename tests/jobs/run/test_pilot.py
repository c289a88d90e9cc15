"""The pilot of ``--calibrate`` (jobs/run/pilot.py): answer lengths and forward factors from examples decoded by the
actor's own ``run_unit``, outside the results, cached by what changes the counts.

Scripted models (streamgen/models/scripted.py) make the counts computable by hand: every answer is 6 content
tokens + EOS (A = 7 tokens); ``constant`` keeps every draft whole, ``lastsegment`` keeps nothing. The pilot runs
in this process (``processes=0``), except in the dry-run test, which runs it as ``--calibrate`` does.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from jobs.grid.gpu_hours import estimate_plan
from jobs.grid.plan import GridPlan, plan_grid
from jobs.run.pilot import PilotFacts, pilot_key, pilot_path, pilot_units, run_pilots
from jobs.run.spool import prepare, spool_dir
from streamgen.config import ConfigError, grid_config
from streamgen.sizing.calibration import Fit
from streamgen.sizing.devices import DEVICES

A = 7  # a scripted answer: 6 content tokens and EOS


def _plan(tmp: Path, models: str, *extra: str) -> GridPlan:
    return plan_grid(grid_config("scripted", [f"models=[{models}]", "acceptance=[greedy,threshold]", "taus=[0.5]",
                                              "limit=2", "shard_size=1", f"results_dir={tmp / 'results'}", *extra]))


@pytest.fixture(scope="module")
def ar(tmp_path_factory: pytest.TempPathFactory) -> tuple[GridPlan, Any, Path]:
    tmp = tmp_path_factory.mktemp("pilot")
    plan = _plan(tmp, "scripted-ar-constant,scripted-ar-lastsegment")
    prepare(plan.grid.results_dir, [])  # results_dir as a run leaves it: its spool folder there, ready
    return plan, run_pilots(plan, tmp / "cal" / "calibration.pilot.json", processes=0), tmp


def test_the_factor_and_answer_length_follow_the_designed_decoders(ar: tuple[GridPlan, Any, Path]) -> None:
    plan, flown, _ = ar
    example = plan.shards[0].example_ids[0]  # the pilot's one example (the first not excluded)
    n = len(plan.segments[("coedit", example)])  # stream steps
    assert n >= 2
    constant, nothing = flown.facts[("scripted-ar-constant", "coedit")], flown.facts[("scripted-ar-lastsegment", "coedit")]
    assert constant.examples == nothing.examples == 1
    assert constant.answer_tokens == nothing.answer_tokens == A
    # the rules, nothing kept, one path for both cells: base run A, step 1 A, each later step A
    assert constant.rule == nothing.rule == 2 * A + (n - 1) * A
    # executed: `constant` keeps every draft whole, so each later step is its one verify forward (both cells on one
    # path); `lastsegment` keeps nothing: what the rules say
    assert constant.executed == 2 * A + (n - 1) * 1
    assert nothing.executed == nothing.rule
    assert constant.factor == pytest.approx((2 * A + (n - 1)) / (2 * A + (n - 1) * A)) and constant.factor < 1
    assert nothing.factor == 1.0


def test_the_estimate_scales_each_pair_by_its_factor_at_the_pilots_lengths(ar: tuple[GridPlan, Any, Path]) -> None:
    plan, flown, _ = ar
    fit = Fit(0.01, 0.0, 0.0, (), 1)
    calibration = {m: fit for m in plan.models}
    at_lengths = estimate_plan(plan, DEVICES["cpu"], workers=1, answer_lengths=flown.answer_lengths,
                               calibration=calibration)
    scaled = estimate_plan(plan, DEVICES["cpu"], workers=1, answer_lengths=flown.answer_lengths,
                           calibration=calibration, factors=flown.factors)
    before = {(x.model, x.benchmark): x for x in at_lengths.lines}
    for x in scaled.lines:
        factor = flown.factors[(x.model, x.benchmark)]
        assert x.gpu_hours == pytest.approx(before[(x.model, x.benchmark)].gpu_hours * factor)
    assert {x.model: x.gpu_hours < before[(x.model, x.benchmark)].gpu_hours for x in scaled.lines} == \
        {"scripted-ar-constant": True, "scripted-ar-lastsegment": False}


def test_the_pilot_writes_nothing_in_results_dir_and_caches_beside_the_calibration(ar: tuple[GridPlan, Any, Path]) -> None:
    plan, flown, tmp = ar
    results = Path(plan.grid.results_dir)
    assert spool_dir(results).is_dir()  # a spool the actor could write to was there
    assert [p for p in results.rglob("*") if p.is_file()] == []
    assert flown.path == tmp / "cal" / "calibration.pilot.json" and flown.path.is_file()
    assert [p.name for p in flown.path.parent.iterdir()] == ["calibration.pilot.json"]
    assert pilot_path(tmp / "cal" / "calibration.json") == flown.path


def test_a_cached_pilot_is_reused_only_for_the_same_cells(ar: tuple[GridPlan, Any, Path]) -> None:
    plan, flown, tmp = ar
    calls: list[str] = []

    def decode(cfg: Any, units: Any) -> Any:
        calls.append(cfg.name)
        raise RuntimeError("decoded again")

    again = run_pilots(plan, flown.path, processes=0, decode=decode)
    assert calls == [] and again.facts == flown.facts
    assert all("read from" in n for n in again.notes)
    # other cells change the counts: a new key, decoded again (here: a decoder that fails, one line each)
    other = _plan(tmp, "scripted-ar-constant,scripted-ar-lastsegment", "taus=[0.9]")
    fresh = run_pilots(other, flown.path, processes=0, decode=decode)
    assert sorted(calls) == ["scripted-ar-constant", "scripted-ar-lastsegment"] and not fresh.facts
    assert sum("failed here (RuntimeError: decoded again)" in n for n in fresh.notes) == 2
    # the key: what changes the counts moves it, a second plan of the same cells does not
    (model, bench), units = next(iter(pilot_units(plan).items()))
    key = pilot_key(plan.models[model], bench, units, "cpu:x", True)
    assert key == pilot_key(plan.models[model], bench, pilot_units(_plan(tmp, "scripted-ar-constant,"
                                                                          "scripted-ar-lastsegment"))[(model, bench)],
                            "cpu:x", True)
    assert key != pilot_key(plan.models[model], bench, pilot_units(other)[(model, bench)], "cpu:x", True)
    assert key != pilot_key(plan.models[model], bench, units, "cpu:x", False)
    assert key != pilot_key(plan.models[model], bench, units, "cuda:H100", True)
    assert key != pilot_key(dataclasses.replace(plan.models[model], seed=1), bench, units, "cpu:x", True)
    assert key != pilot_key(plan.models[model], bench, pilot_units(plan, 2)[(model, bench)], "cpu:x", True)


def test_the_pilot_decodes_every_verifier_mode(tmp_path: Path) -> None:
    both = _plan(tmp_path, "scripted-dgemma-constant", "verifier_modes=[visible,hidden]")
    one = _plan(tmp_path, "scripted-dgemma-constant", "verifier_modes=[visible]")
    units = pilot_units(both)[("scripted-dgemma-constant", "coedit")]
    assert {s.cell.verifier_mode for u in units for s in u} == {"visible", "hidden"}  # one unit kind per mode
    key = ("scripted-dgemma-constant", "coedit")
    f2 = run_pilots(both, tmp_path / "both.json", processes=0).facts[key]
    f1 = run_pilots(one, tmp_path / "one.json", processes=0).facts[key]
    assert f2.examples == f1.examples == 1
    assert f2.executed == 2 * f1.executed and f2.rule == 2 * f1.rule  # the same example, once per mode
    assert f2.factor == pytest.approx(f1.factor)


def test_a_foreign_pilot_file_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "scripted-ar-constant")
    bad = tmp_path / "calibration.pilot.json"
    bad.write_text('{"format": "streamgen-pilot/1", "entries": {"k": {"facts": {"model": "m"}}}}')
    with pytest.raises(ConfigError) as err:
        run_pilots(plan, bad, processes=0)
    assert len(err.value.problems) == 1 and "--calibrate=PATH" in err.value.problems[0]
    assert PilotFacts("m", "b", 1, 7.0, 3, 0).factor == 1.0  # no rule forwards: no scaling


def test_the_dry_run_prints_the_pilots_facts_and_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--calibrate`` as the workflow runs it (the pilot in a spawned process), the timing replaced by a
    fixed fit (what is under test is the pilot's part)."""
    import streamgen.sizing.calibration as calibration
    from jobs.cluster.dry_run import dry_run_report, duration

    fit = Fit(1.0, 0.0, 0.0, (), 1)  # 1 s a forward, whatever its width
    monkeypatch.setattr(calibration, "calibrate_models", lambda models, path, **_: calibration.Calibration(
        {m: fit for m in models}, Path(path), "cpu:test", ()))
    grid = grid_config("scripted", ["models=[scripted-ar-constant]", "acceptance=[greedy,threshold]", "taus=[0.5]",
                                    "limit=2", "shard_size=1", "workers=1", f"results_dir={tmp_path / 'results'}"])
    import streamgen.sizing.cpu_share as cpu_share

    monkeypatch.setattr(cpu_share, "available_cores", lambda: 2)
    text, _ = dry_run_report(grid, calibrate=tmp_path / "calibration.json")
    # the company on this CPU: one actor and one scorer on two cores share nothing (× 1.00: the row below holds)
    share = next(ln for ln in text.splitlines() if "the run's scoring is about" in ln)
    assert "on 2 core(s) with 1 model actor(s): its decodes × 1.00" in share, share
    line = next(ln for ln in text.splitlines() if ln.startswith("pilot scripted-ar-constant on coedit"))
    assert "1 example(s), base answer 7.0 tokens" in line and "= factor 0.71" in line, line  # n = 2: 15 / 21
    assert "pilot: 1 (model, benchmark) pair(s) decoded in" in text
    # the time factor: the pilot's measured decoding (its file holds it) over the fit's 1 s × its 15 forwards
    (facts,) = [e["facts"] for e in json.loads((tmp_path / "calibration.pilot.json").read_text())["entries"].values()]
    assert facts["predicted_s"] == 15.0 and facts["wall_s"] > 0
    time_factor = facts["wall_s"] / 15.0
    assert f"against the fit's 15.0 s for the same decodes: its seconds × {time_factor:.2f} (time factor)" in text
    # the calibrated decoding: 1 s × the rules' forwards at the pilot's answer length (A, not half the budget)
    # × the forward factor × the time factor
    plan = plan_grid(grid)
    rules = sum(2 * A + (len(plan.segments[("coedit", e)]) - 1) * A for s in plan.shards[:: 2] for e in s.example_ids)
    table = text.split("calibrated on ")[1].splitlines()  # the calibrated table: model, benchmark, roofline, calibrated
    row = next(ln for ln in table if ln.startswith("scripted-ar-constant  coedit"))
    assert row.split()[4:6] == duration(rules * 15 / 21 * time_factor).split(), (row, rules, time_factor)
    cost = next(ln for ln in text.splitlines() if ln.startswith("pilot: costs about"))
    assert "(50% of the calibrated estimate" in cost, cost  # 1 of the pair's 2 examples (one unit kind)
    again, _ = dry_run_report(grid, calibrate=tmp_path / "calibration.json", pilot=0)
    assert "pilot: none (--pilot=0)" in again and "pilot scripted-ar-constant" not in again
    assert not (tmp_path / "results").exists()


def test_one_process_per_model_gives_each_pair_its_own_units(tmp_path: Path) -> None:
    """``processes=1`` (as on a GPU) decodes all of a model's pairs in one spawned process, one load; the decoded
    units go back to their own (model, benchmark): the same facts as decoding each pair in this process."""
    plan = plan_grid(grid_config("scripted", ["models=[scripted-ar-constant]", "benchmarks=[coedit,mbpp]",
                                              "acceptance=[greedy,threshold]", "taus=[0.5]", "limit=2", "shard_size=1",
                                              f"results_dir={tmp_path / 'results'}"]))
    def counts(facts: Any) -> dict[Any, PilotFacts]:  # scoring's CPU-seconds are measured, not counted
        return {k: dataclasses.replace(f, score_cpu_s=0.0, scorer_start_s=0.0) for k, f in facts.items()}

    spawned = counts(run_pilots(plan, tmp_path / "one.json", processes=1).facts)
    here = counts(run_pilots(plan, tmp_path / "here.json", processes=0).facts)
    assert spawned == here and len(here) == 2
    assert here[("scripted-ar-constant", "coedit")].rule != here[("scripted-ar-constant", "mbpp")].rule


def test_a_gpu_clusters_dry_run_on_a_machine_without_one_skips_the_pilot(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import jobs.run.pilot as pilot
    import streamgen.sizing.calibration as calibration
    from jobs.cluster import dry_run

    fit = Fit(1.0, 0.0, 0.0, (), 1)
    monkeypatch.setattr(calibration, "calibrate_models", lambda models, path, **_: calibration.Calibration(
        {m: fit for m in models}, Path(path), "cpu:test", ()))
    monkeypatch.setattr(pilot, "run_pilots", lambda *a, **k: pytest.fail("the pilot ran"))
    monkeypatch.setattr(dry_run, "_cuda", lambda: False)
    grid = grid_config("scripted", ["models=[scripted-ar-constant]", "limit=1", "cluster=slurm_a100",
                                    f"results_dir={tmp_path / 'results'}"])
    text, _ = dry_run.dry_run_report(grid, calibrate=tmp_path / "calibration.json")
    assert "pilot: skipped: this machine has no GPU" in text and "run --calibrate on the allocation" in text
    assert not (tmp_path / "calibration.pilot.json").exists()


def test_the_time_factor_is_the_pilots_measured_decoding_over_the_fits_seconds_for_it(tmp_path: Path) -> None:
    """With a fit of 10 ms for every forward, the fit's seconds for the pilot's decodes are 0.01 × the forwards the
    pilot executed; the time factor is the actor's measured decoding over that — on this CPU its CPU time (Σ cpu_s:
    what the pilot's own processes do beside it does not enter), on a GPU its wall — pooled over a model's
    benchmarks, and it scales that model's seconds in the estimate, not its forwards."""
    from jobs.run.pilot import decode_seconds, decode_units

    plan = _plan(tmp_path, "scripted-ar-constant,scripted-ar-lastsegment", "benchmarks=[coedit,humaneval]")
    busy: dict[str, float] = {}

    def decode(cfg: Any, units: Any) -> Any:
        decoded = decode_units(cfg, units)
        for shards in decoded:
            assert {d.device for d in shards} == {"cpu"} and shards[0].cpu_s > 0
            assert decode_seconds(shards) == sum(d.cpu_s for d in shards) != sum(d.busy_s for d in shards)
            on_gpu = [dataclasses.replace(d, device="cuda:H100") for d in shards]
            assert decode_seconds(on_gpu) == sum(d.busy_s for d in shards)
        busy[cfg.name] = busy.get(cfg.name, 0.0) + sum(d.cpu_s for shards in decoded for d in shards)
        return decoded

    fit = Fit(0.01, 0.0, 0.0, (), 1)
    fits = {m: fit for m in plan.models}
    flown = run_pilots(plan, tmp_path / "timed.pilot.json", processes=0, decode=decode, fits=fits)
    assert {b for _, b in flown.facts} == {"coedit", "humaneval"}
    for model in plan.models:
        facts = [f for f in flown.facts.values() if f.model == model]
        for f in facts:
            assert f.predicted_s == pytest.approx(0.01 * f.executed)
        assert sum(f.wall_s for f in facts) == pytest.approx(busy[model]) and busy[model] > 0
        assert flown.time_factors[model] == pytest.approx(busy[model] / (0.01 * sum(f.executed for f in facts)))
    counts = estimate_plan(plan, DEVICES["cpu"], workers=1, answer_lengths=flown.answer_lengths, calibration=fits,
                           factors=flown.factors)
    timed = estimate_plan(plan, DEVICES["cpu"], workers=1, answer_lengths=flown.answer_lengths, calibration=fits,
                          factors=flown.factors, time_factors=flown.time_factors)
    before = {(x.model, x.benchmark): x for x in counts.lines}
    for x in timed.lines:
        assert x.gpu_hours == pytest.approx(before[(x.model, x.benchmark)].gpu_hours * flown.time_factors[x.model])
        assert x.forwards == before[(x.model, x.benchmark)].forwards
    # the timing was compared with this fit: another fit flies the pilot again; the same one reads it back
    again = run_pilots(plan, tmp_path / "timed.pilot.json", processes=0, decode=decode, fits=fits)
    assert all("read from" in n for n in again.notes if n.startswith("pilot of"))
    other = {m: Fit(0.02, 0.0, 0.0, (), 1) for m in plan.models}
    refit = run_pilots(plan, tmp_path / "timed.pilot.json", processes=0, decode=decode, fits=other)
    assert not any("read from" in n for n in refit.notes)
    assert all(f.predicted_s == pytest.approx(0.02 * f.executed) for f in refit.facts.values())


def test_the_company_is_the_scoring_per_example_times_the_runs_examples_and_one_start_per_scorer(
        ar: tuple[GridPlan, Any, Path]) -> None:
    """``Pilot.company_s``: per (model, benchmark) the pilot's scoring CPU-seconds per example × the run's examples of
    the pair, plus ``score_workers`` scorer starts; the estimate on a CPU scales every unit by what sharing the cores
    with it costs (streamgen/sizing/cpu_share.py), forwards unchanged."""
    from jobs.run.pilot import Pilot, run_examples
    from streamgen.sizing.cpu_share import shared_decode_seconds

    plan, flown, _ = ar
    starts = {f.scorer_start_s for f in flown.facts.values()}
    assert len(starts) == 1 and starts.pop() > 0  # timed once per flight: a fresh interpreter importing ray
    assert all(f.score_cpu_s >= 0 for f in flown.facts.values())
    examples = run_examples(plan)
    assert examples == {(m, "coedit"): 2 for m in plan.models}  # limit=2, none excluded
    one = PilotFacts("a", "coedit", 1, 7.0, 10, 10, score_cpu_s=0.3, scorer_start_s=1.5)
    two = PilotFacts("b", "mbpp", 2, 7.0, 10, 10, score_cpu_s=1.0, scorer_start_s=1.5)
    pilot = Pilot({("a", "coedit"): one, ("b", "mbpp"): two}, Path("x"), ())
    assert pilot.company_s({("a", "coedit"): 10, ("b", "mbpp"): 4}, score_workers=2) == pytest.approx(
        0.3 / 1 * 10 + 1.0 / 2 * 4 + 2 * 1.5)
    alone = estimate_plan(plan, DEVICES["cpu"], workers=2, answer_lengths=flown.answer_lengths)
    company = 0.5 * alone.gpu_hours * 3600  # half the decoding again: the cores are shared
    shared = estimate_plan(plan, DEVICES["cpu"], workers=2, answer_lengths=flown.answer_lengths, company_s=company,
                           cores=2, company_processes=1)
    factor = shared_decode_seconds(alone.gpu_hours * 3600, company, 2, 2, 1) / (alone.gpu_hours * 3600)
    assert factor > 1.1 and shared.cpu_share == pytest.approx(factor) and alone.cpu_share == 1.0
    before = {(x.model, x.benchmark): x for x in alone.lines}
    for x in shared.lines:
        assert x.gpu_hours == pytest.approx(before[(x.model, x.benchmark)].gpu_hours * factor)
        assert x.forwards == before[(x.model, x.benchmark)].forwards


def test_the_scoring_clock_counts_the_sandbox_children() -> None:
    """score_cpu's clock is this process's CPU and its waited-for children's: a child burning CPU shows in it."""
    import subprocess
    import sys

    from jobs.run.pilot import _cpu_s

    before = _cpu_s()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"],
                   check=True)
    assert _cpu_s() - before >= 0.45


def test_an_unscored_cached_pilot_flies_again_when_its_scoring_is_wanted(ar: tuple[GridPlan, Any, Path]) -> None:
    """A GPU dry run's pilot does not score (scoring does not slow a GPU); its cache entries say so, and a CPU dry
    run of the same cells decodes them again rather than price a company of 0 from them."""
    plan, _, tmp = ar
    path = tmp / "unscored" / "calibration.pilot.json"
    unscored = run_pilots(plan, path, processes=0, score=False)
    assert all(f.score_cpu_s == 0.0 and f.scorer_start_s == 0.0 for f in unscored.facts.values())
    assert not any(e["scored"] for e in json.loads(path.read_text())["entries"].values())
    assert all("read from" in n for n in run_pilots(plan, path, processes=0, score=False).notes if n.startswith("pilot of"))
    scored = run_pilots(plan, path, processes=0)
    assert not any("read from" in n for n in scored.notes) and all(f.scorer_start_s > 0 for f in scored.facts.values())
    assert all(e["scored"] for e in json.loads(path.read_text())["entries"].values())
    again = run_pilots(plan, path, processes=0)
    assert all("read from" in n for n in again.notes if n.startswith("pilot of")) and again.facts == scored.facts
