"""The estimate's measured seconds (``--calibrate``: streamgen/sizing/calibration.py), float32 at the FP32 rate,
a mixture of experts' weights read, and the actors' warm-up pairs (jobs/grid/gpu_hours.py). Every expected number
is a formula written out here; the calibration is timed on an injected fake clock."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from jobs.grid.gpu_hours import estimate_plan, example_cost
from streamgen.config import ConfigError, model_config
from streamgen.decoding.base import Generation
from streamgen.decoding.meter import ForwardMeter
from streamgen.sizing.calibration import (
    Fit,
    calibrate_decoder,
    calibrate_models,
    fit_line,
    load_cache,
    medians_by_width,
)
from streamgen.sizing.devices import DEVICES, TF32_ENABLED, experts_touched, forward_seconds, weights_read
from streamgen.sizing.forward_counts import Decode, decode_rule
from streamgen.sizing.parameters import ModelSize, model_parameters, model_size

ROOT = Path(__file__).resolve().parents[3]


# --- the calibration, on a designed fake timer -----------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeDecoder:
    """A decoder whose model call of T tokens takes ``a + b·T`` on a fake clock and which spends ``gap``
    between calls; a request of n words: one prefill of n tokens, then ``answer - 1`` one-token calls.
    Its first pass (the warm-up) is ``slow`` times slower; ``spike``: one call of each timed pass at width
    1 takes 50 × longer (the median must ignore it)."""

    def __init__(self, a: float, b: float, gap: float, answer: int = 4, slow: float = 100.0) -> None:
        self.clock = FakeClock()
        self.meter = ForwardMeter(clock=self.clock)
        self.a, self.b, self.gap, self.answer, self.slow = a, b, gap, answer, slow
        self.passes = 0

    def generate(self, messages: list[dict[str, str]]) -> Generation:
        factor = self.slow if self.passes < 3 else 1.0  # three requests per pass: the first pass is the warm-up
        self.passes += 1
        widths = [len(messages[-1]["content"].split())] + [1] * (self.answer - 1)
        with self.meter.span() as span:
            for i, w in enumerate(widths):
                with self.meter.call("x", w):
                    spike = 50.0 if (w == 1 and i == 1 and factor == 1.0 and self.passes % 2 == 0) else 1.0
                    self.clock.now += (self.a + self.b * w) * factor * spike
                self.clock.now += self.gap
        return Generation((), "", True, span.wall_s, span.meter)


MESSAGES = [[{"role": "user", "content": " ".join(["w"] * n)}] for n in (10, 50, 200)]


def test_calibration_fits_the_medians_after_the_warm_up_and_measures_the_time_between_calls() -> None:
    a, b, gap = 2e-3, 1e-5, 3e-4
    dec = FakeDecoder(a, b, gap)
    fit = calibrate_decoder(dec, MESSAGES, repeats=3, warmup=1)
    # the timed passes' points: widths 1, 10, 50, 200 at a + b·w (the warm-up's 100× and the spikes gone)
    assert [w for w, _ in fit.points] == [1, 10, 50, 200]
    for w, s in fit.points:
        assert s == pytest.approx(a + b * w)
    assert (fit.a, fit.b) == pytest.approx((a, b))
    assert fit.samples == 3 * 3 * 4  # 3 repeats × 3 requests × (1 prefill + 3 one-token calls)
    assert fit.between_s == pytest.approx(gap)  # per forward, outside the model calls
    assert fit.seconds(100) == pytest.approx(a + b * 100 + gap)  # interpolated between 50 and 200


def test_medians_and_the_line_by_formula() -> None:
    assert medians_by_width([(1, 3.0), (1, 1.0), (1, 2.0), (5, 7.0)]) == {1: 2.0, 5: 7.0}
    xs, ys = [1, 10, 100], [0.5 + 0.01 * x for x in (1, 10, 100)]
    assert fit_line(dict(zip(xs, ys, strict=True))) == pytest.approx((0.5, 0.01))
    assert fit_line({1: 3.0, 100: 1.0}) == (2.0, 0.0)  # negative slope: flat at the mean
    assert fit_line({7: 4.0}) == (4.0, 0.0)
    # negative intercept: the least-squares line through the origin, b = Σxy / Σx²
    pts = {10: 1.0, 100: 30.0}
    assert fit_line(pts) == pytest.approx((0.0, (10 * 1.0 + 100 * 30.0) / (10 ** 2 + 100 ** 2)))


def test_fit_seconds_interpolates_holds_below_and_extends_with_the_slope() -> None:
    fit = Fit(a=0.0, b=0.5, between_s=0.25, points=((1, 1.0), (101, 3.0)), samples=2)
    assert fit.seconds(51) == pytest.approx(2.0 + 0.25)
    assert fit.seconds(0) == pytest.approx(1.0 + 0.25)
    assert fit.seconds(201) == pytest.approx(3.0 + 0.5 * 100 + 0.25)


# --- the cache file ---------------------------------------------------------------------------------------


def test_the_calibration_file_is_reused_and_a_changed_model_is_measured_again(tmp_path: Path) -> None:
    path, calls = tmp_path / "cal.json", []
    fit = Fit(1e-3, 2e-6, 1e-4, ((1, 1e-3), (9, 1.016e-3)), 10)

    def measure(cfg):  # type: ignore[no-untyped-def]
        calls.append(cfg.name)
        return fit

    models = {"tiny-llama": model_config("tiny-llama")}
    first = calibrate_models(models, path, measure=measure)
    assert calls == ["tiny-llama"] and first.fits["tiny-llama"] == fit
    data = json.loads(path.read_text())
    (entry,) = data["entries"].values()
    assert (entry["model"], entry["dtype"], entry["device"]) == ("tiny-llama", "float32", first.device)
    assert Fit.from_dict(entry["fit"]) == fit  # round trip
    again = calibrate_models(models, path, measure=measure)
    assert calls == ["tiny-llama"] and again.fits == first.fits  # read, not measured
    assert any("read from" in n for n in again.notes)
    changed = {"tiny-llama": dataclasses.replace(models["tiny-llama"], seed=1)}  # another model version
    third = calibrate_models(changed, path, measure=measure)
    assert calls == ["tiny-llama", "tiny-llama"]
    (stale,) = [n for n in third.notes if "stale" in n]
    assert "tiny-llama" in stale and str(path) in stale and "\n" not in stale
    other_dtype = {"tiny-llama": dataclasses.replace(models["tiny-llama"], dtype="bfloat16")}
    calibrate_models(other_dtype, path, measure=measure)
    assert len(calls) == 3  # dtype is part of the key
    # estimate-only fields change no measurement: the entry is reused
    calibrate_models({"tiny-llama": dataclasses.replace(models["tiny-llama"], parameters=5)}, path, measure=measure)
    assert len(calls) == 3


def test_a_model_that_cannot_be_timed_here_keeps_the_roofline_with_one_line(tmp_path: Path) -> None:
    def measure(cfg):  # type: ignore[no-untyped-def]
        raise FileNotFoundError("no snapshot of google/x in the cache\nsecond line")

    cal = calibrate_models({"tiny-llama": model_config("tiny-llama")}, tmp_path / "c.json", measure=measure)
    assert cal.fits == {} and not (tmp_path / "c.json").exists()
    (line,) = cal.notes
    assert "cannot time it here (FileNotFoundError: no snapshot of google/x in the cache)" in line
    assert "roofline" in line and "second line" not in line


def test_a_foreign_calibration_file_stops_with_one_line_naming_the_fix(tmp_path: Path) -> None:
    for text in ("not json", json.dumps({"format": "other"}), json.dumps({"format": "other", "entries": {}}), json.dumps({"format": "streamgen-calibration/1",
                                                                          "entries": {"k": {"fit": {"a": 1}}}})):
        path = tmp_path / "cal.json"
        path.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_cache(path)
        (line,) = str(err.value).strip().splitlines()[-1:]
        assert "is not a streamgen calibration" in str(err.value) and "--calibrate=PATH" in str(err.value)
        assert str(path) in line


def test_the_estimate_prices_a_calibrated_model_at_its_fit() -> None:
    cfg = model_config("tiny-llama")
    size = ModelSize(10_000, 2, "test")
    fit = Fit(0.0, 1e-4, 1e-3, ((1, 2e-3), (300, 0.03)), 1)
    from streamgen.requests.request import StreamRequest

    req = StreamRequest("x", (), ("a" * 40, "b" * 40))
    cost = example_cost(cfg, "coedit", 16, req, req.segments, 1, DEVICES["cpu"], size, fit=fit, share=False)
    rule = decode_rule(cfg, "coedit", 16)
    p1, p2 = 40 // 4 + 16, 80 // 4 + 16  # prompt tokens: characters / 4 + 16 template tokens
    answer = 8  # half the budget
    work = [*rule(Decode(p2, answer)), *rule(Decode(p1, answer)),
            *rule(Decode(p2, answer, draft=answer, accepted=0, fed=p2 - p1 + answer))]
    assert cost.seconds == pytest.approx(sum(f.count * fit.seconds(f.tokens) for f in work))


# --- float32 at the FP32 rate ----------------------------------------------------------------------------


def test_float32_is_priced_at_fp32_and_at_tf32_only_when_enabled() -> None:
    a100, n, t = DEVICES["a100-80gb"], 1e9, 1000
    fp32 = forward_seconds(a100, params=n, tokens=t, layers=0, dtype="float32")
    assert fp32 == pytest.approx(2 * n * t / (19.5e12 * 0.5))  # compute-bound: 4e9 bytes / 1.43e12 B/s ≈ 2.8 ms
    tf32 = forward_seconds(a100, params=n, tokens=t, layers=0, dtype="float32", tf32=True)
    assert tf32 == pytest.approx(2 * n * t / (156e12 * 0.5))
    assert forward_seconds(a100, params=n, tokens=t, layers=0, dtype="bfloat16", tf32=True) == pytest.approx(
        2 * n * t / (312e12 * 0.5))
    assert [DEVICES[k].fp32_flops for k in ("a100-80gb", "a6000", "h100", "h200")] == [19.5e12, 38.7e12, 67e12, 67e12]
    assert TF32_ENABLED is False


def test_no_module_enables_tf32() -> None:
    """TF32_ENABLED = False holds only while nothing sets it: no assignment to allow_tf32, no
    set_float32_matmul_precision call anywhere in the project's code."""
    pattern = re.compile(r"allow_tf32\s*=(?!=)|set_float32_matmul_precision\s*\(")
    hits = [f"{p.relative_to(ROOT)}: {line.strip()}" for d in ("streamgen", "jobs", "workflows", "analysis", "bench")
            for p in (ROOT / d).rglob("*.py") for line in p.read_text(errors="replace").splitlines()
            if pattern.search(line) and "``" not in line]  # code, not a docstring's ``quote``
    assert hits == []


# --- a mixture of experts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("tokens", "experts", "k"), [(1, 128, 8), (16, 128, 8), (256, 128, 8), (3, 4, 2), (5, 8, 8)])
def test_experts_touched_by_formula(tokens: int, experts: int, k: int) -> None:
    assert experts_touched(tokens, experts, k) == pytest.approx(min(1.0, 1 - (1 - k / experts) ** tokens))


def test_a_moe_forward_reads_its_active_weights_for_one_token_and_nearly_all_for_a_canvas() -> None:
    n, active, e, k = 26e9, 4e9, 128, 8
    expert_part = (n - active) / (1 - k / e)
    assert weights_read(n, 1, active=active, experts=e, top_k=k) == pytest.approx(active)  # touched(1) = k/E
    canvas = weights_read(n, 256, active=active, experts=e, top_k=k)
    assert canvas == pytest.approx(n - expert_part + expert_part * (1 - (1 - k / e) ** 256))
    assert canvas / n > 0.999
    a100 = DEVICES["a100-80gb"]
    sec = forward_seconds(a100, params=n, tokens=256, layers=0, active=active, experts=e, top_k=k)
    assert sec == pytest.approx(max(2 * active * 256 / (312e12 * 0.5), canvas * 2 / (2.039e12 * 0.7)))


def test_diffusiongemma_is_sized_at_all_its_weights_for_memory() -> None:
    cfg = model_config("diffusiongemma-26b-a4b-it")
    size = model_size(cfg)
    assert size is not None and (size.parameters, size.active, size.experts, size.top_k) == (26e9, 4e9, 128, 8)
    assert model_parameters(cfg) == 26e9  # what jobs.cluster.dry_run.work_facts multiplies by the dtype's bytes


# --- the actors' warm-up pairs ----------------------------------------------------------------------------


def _plan(overrides: list[str]):  # type: ignore[no-untyped-def]
    from jobs.grid.plan import plan_grid
    from streamgen.config import grid_config

    return plan_grid(grid_config("smoke", ["models=[tiny-llada,tiny-llama]", "benchmarks=[coedit]", "limit=6",
                                           *overrides]))


@pytest.mark.parametrize(("workers", "shard_size"), [(2, 1), (8, 2), (1, 3)])
def test_the_warm_up_pair_counts_once_per_actor_per_model(workers: int, shard_size: int) -> None:
    from jobs.grid.units import group_shards
    from streamgen.warmup import WARMUP_REQUEST

    plan = _plan([f"shard_size={shard_size}"])
    cpu = DEVICES["cpu"]
    est = estimate_plan(plan, cpu, workers=workers)
    units = group_shards(plan.shards, share=plan.grid.share_work)
    assert {w.model for w in est.warmups} == {"tiny-llada", "tiny-llama"}
    for w in est.warmups:
        mine = [u[0] for u in units if u[0].model_name == w.model]
        assert w.actors == min(workers, len(mine))  # 6 examples / shard_size units per model
        cell = mine[0].cell
        one = example_cost(cell.model, "coedit", cell.max_new_tokens, WARMUP_REQUEST, WARMUP_REQUEST.segments, 1, cpu,
                           model_size(cell.model), share=False)
        assert (w.seconds, w.forwards) == pytest.approx((one.seconds, one.forwards))
        assert w.gpu_hours == pytest.approx(w.actors * one.seconds / 3600)
    assert est.total_hours == pytest.approx(est.gpu_hours + sum(w.actors * w.seconds for w in est.warmups) / 3600)
    assert estimate_plan(_plan(["warm_up=false"]), cpu, workers=workers).warmups == ()


def test_the_dry_run_prints_the_warm_up_as_its_own_line() -> None:
    from jobs.cluster.dry_run import render_estimate
    from streamgen.config import ClusterConfig, grid_config

    plan = _plan(["shard_size=3"])
    est = estimate_plan(plan, DEVICES["cpu"], workers=2)
    text = render_estimate(est, grid_config("smoke", []), ClusterConfig(), {})
    lines = [ln for ln in text.splitlines() if " warm-up " in ln and "actor" in ln]
    assert len(lines) == 2 and all("2 actor(s) × 1 pair on coedit" in ln for ln in lines)
    assert f"estimate: {est.total_hours:,.2f} GPU-hours in all" in text


def test_the_dry_run_prints_the_calibrated_estimate_beside_the_roofline(tmp_path: Path) -> None:
    """--calibrate on the dry run: the fits come from the file (filled here by a fake timer, as many at once
    as the grid's workers), the table holds both columns per (model, benchmark), the total is the
    calibrated estimate's. No pilot (``--pilot=0``): its answer lengths and factors are tests/jobs/run/test_pilot.py's."""
    from jobs.cluster.dry_run import dry_run_report, duration
    from jobs.grid.plan import plan_grid
    from streamgen.config import grid_config

    grid = grid_config("smoke", ["models=[tiny-llada,tiny-llama]", "benchmarks=[coedit]", "limit=3",
                                 f"results_dir={tmp_path / 'r'}"])
    plan = plan_grid(grid)
    fit = Fit(0.0, 1e-4, 1e-3, ((1, 2e-3), (300, 0.03)), 1)
    path = tmp_path / "cal.json"
    calibrate_models(plan.models, path, concurrent=grid.workers, measure=lambda cfg: fit)
    text, _ = dry_run_report(grid, calibrate=path, pilot=0)
    cal = estimate_plan(plan, DEVICES["cpu"], workers=2, calibration={m: fit for m in plan.models})
    roof = estimate_plan(plan, DEVICES["cpu"], workers=2)
    part = text.split("calibrated on ", 1)[1]
    assert str(path) in part and part.count("read from") == 2  # nothing measured: both read from the file
    for x in roof.lines:
        c = next(y for y in cal.lines if (y.model, y.benchmark) == (x.model, x.benchmark))
        (row,) = [ln for ln in part.splitlines() if ln.split()[:2] == [x.model, x.benchmark]]
        assert row.split()[-1] == f"{c.gpu_hours / x.gpu_hours:.2f}"
    assert f"calibrated: decoding {duration(cal.gpu_hours * 3600)}" in part
