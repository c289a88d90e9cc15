"""The estimate's forward counts against the counts real grids record (streamgen/sizing/forward_counts.py,
jobs/grid/gpu_hours.py).

Two grids run through workflows/full_grid.py: tiny random models of all five decoders (autoregressive,
ReFusion, LLaDA, Dream, DiffusionGemma) on CoEdIT with two acceptance cells, and scripted diffusion
models whose outcomes are designed (kept whole / k tokens). Checked per example:

- each decode's forwards (base run and every stream step) EQUAL the family rule's, given the decode's
  recorded answer length, draft and kept run (the rules reproduce the procedures; the scripted ReFusion,
  confident by design, commits several tokens a round: its rule is the bound there);
- the estimate for the example (``example_cost``: nothing kept, answers at their bound) bounds the
  recorded total from above, and EQUALS it for LLaDA / Dream examples where nothing was kept (their
  schedule fixes every forward; with a kept run the refill rule decides, checked per decode above).
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.grid.gpu_hours import example_cost
from streamgen.config import REPO_ROOT, model_config
from streamgen.families.diffusion_gemma.forward_rule import dg_shape, diffusion_gemma
from streamgen.sizing.devices import DEVICES
from streamgen.sizing.forward_counts import Decode, answer_positions, decode_rule, total_forwards
from streamgen.sizing.parameters import ModelSize

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = ["tiny-llama", "tiny-refusion", "tiny-llada", "tiny-dream", "tiny-diffusiongemma"]
SCRIPTED = ["scripted-llada-constant", "scripted-llada-prefix", "scripted-dgemma-constant",
            "scripted-dgemma-lastsegment", "scripted-refusion-prefix", "scripted-ar-prefix"]
BUDGET = 16


def _run(tmp: Path, grid: str, models: list[str], *extra: str) -> Path:
    out = tmp / grid
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "workflows" / "full_grid.py"), f"grid={grid}",
                           f"models=[{','.join(models)}]", "benchmarks=[coedit]", "limit=2", f"max_new_tokens={BUDGET}",
                           f"results_dir={out}", *extra], cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def grids(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("counts")
    return [_run(tmp, "smoke", TINY, "acceptance=[greedy,threshold]", "taus=[0.5]"), _run(tmp, "scripted", SCRIPTED)]


def _rows(results: Path, table: str) -> list[dict]:
    return [r for f in sorted((results / table).rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def _rule(model: str):  # type: ignore[no-untyped-def]
    """The family rule; a scripted DiffusionGemma's canvases stop as early as the stability rule allows
    (s_min steps each, by design: configs/models/scripted-dgemma-*.yaml), the rule's bound is max steps."""
    cfg = model_config(model)
    if cfg.family == "diffusion_gemma" and cfg.source == "scripted":
        canvas, _, s_min = dg_shape(cfg)
        return lambda d: diffusion_gemma(canvas, s_min, s_min, d)
    return decode_rule(cfg, "coedit", BUDGET)


def _matches(model: str, recorded: int, rule_says: int) -> bool:
    """Equal; the scripted ReFusion is confident (several tokens per round), its rule the bound (2 / position)."""
    return recorded <= rule_says if model == "scripted-refusion-prefix" else recorded == rule_says


def test_every_decode_has_the_forwards_its_family_rule_gives(grids: list[Path]) -> None:
    seen: defaultdict[str, int] = defaultdict(int)
    for results in grids:
        for p in _rows(results, "pairs"):
            if p["excluded_reason"] is None:
                want = total_forwards(_rule(p["model"])(Decode(50, p["base_answer_tokens"])))
                assert _matches(p["model"], p["base_forwards"], want), (p["model"], p["base_forwards"], want)
        for s in _rows(results, "steps"):
            answer = s["accepted_tokens"] + s["generated_tokens"]
            d = Decode(50, answer, draft=s["draft_tokens_in"], accepted=s["accepted_tokens"])
            want = total_forwards(_rule(s["model"])(d))
            assert _matches(s["model"], s["forwards"], want), (s["model"], s["step"], d, s["forwards"], want)
            seen[s["model"]] += 1
            seen["kept some"] += bool(s["accepted_tokens"])
    assert set(TINY + SCRIPTED) <= set(seen) and seen["kept some"] > 0  # the kept-run path was exercised


def test_the_estimate_bounds_every_example_and_equals_llada_and_dream_when_nothing_is_kept(grids: list[Path]) -> None:
    from jobs.grid.plan import plan_grid
    from streamgen.config import grid_config

    size = ModelSize(1, 1, "counts only")
    checked: defaultdict[str, int] = defaultdict(int)
    for results, models in zip(grids, (TINY, SCRIPTED), strict=True):
        grid = grid_config("smoke", [f"models=[{','.join(models)}]", "benchmarks=[coedit]", "limit=2",
                                     f"max_new_tokens={BUDGET}", f"results_dir={results}"])
        plan = plan_grid(grid)
        steps = defaultdict(list)
        for s in _rows(results, "steps"):
            steps[(s["model"], s["example_id"], s["acceptance"])].append(s)
        for p in _rows(results, "pairs"):
            if p["excluded_reason"] is not None:
                continue
            cfg = model_config(p["model"])
            recorded = p["base_forwards"] + p["speculative_forwards"] + p["residual_forwards"]
            ex, segs = plan.examples["coedit"][p["example_id"]], plan.segments[("coedit", p["example_id"])]
            bound = answer_positions(cfg, "coedit", BUDGET)
            est = example_cost(cfg, "coedit", BUDGET, ex, segs, 1, DEVICES["cpu"], size, bound, share=False).forwards
            kept = [s["accepted_tokens"] for s in steps[(p["model"], p["example_id"], p["acceptance"])]]
            assert recorded <= est, p["model"]
            if cfg.family == "bidirectional" and not any(kept):
                assert recorded == est, p["model"]  # nothing kept: the schedule fixes every forward
                checked["bidirectional, exact"] += 1
            checked[cfg.family] += 1
    assert set(checked) == {"autoregressive", "refusion", "bidirectional", "diffusion_gemma", "bidirectional, exact"}
