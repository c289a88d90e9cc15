"""Adapt a model to incomplete requests (paper §7): pairs → LoRA training → merge → evaluate (Table 3).

Local (the smoke recipe: tiny random llama, the whole chain in under three minutes on CPU)::

    python workflows/adapt.py adapt=smoke
    python workflows/adapt.py adapt=smollm2-mbpp train.steps=60 source.limit=40   # a real, small run
    python workflows/adapt.py adapt=smoke stage=train train.steps=40              # one stage (resumes)

Debug (the model stages through submitit's in-process DebugExecutor; breakpoints work)::

    python workflows/adapt.py adapt=smoke cluster=debug

Slurm (pairs + training + merge as one requeueable one-GPU job; evaluation is the grid's own Slurm job)::

    python workflows/adapt.py adapt=smollm2-mbpp cluster=slurm

Arguments: ``adapt=NAME`` (``configs/adapt/NAME.yaml``, default ``smollm2-mbpp``), ``stage=all | pairs |
train | merge | eval`` (default all; repeat for several) and ``key=value`` overrides of the recipe
(``streamgen.adapt.config.AdaptConfig``). Every stage resumes: teacher answers are cached, training
restarts from its newest checkpoint. Outputs: ``<output.dir>/`` and ``configs/models/<model_name>.yaml``;
the evaluation grid's results under ``<output.dir>/eval`` with Table 3 printed at the end.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages first

from streamgen.adapt.config import AdaptConfig, adapt_config, validate_adapt  # noqa: E402
from streamgen.config import ConfigError, cluster_config, grid_config, raise_if_problems, to_yaml  # noqa: E402

log = logging.getLogger("adapt")
STAGES = ("pairs", "train", "merge", "eval")


def parse_args(argv: Sequence[str]) -> tuple[str, tuple[str, ...], list[str]]:
    name, stages, overrides = "smollm2-mbpp", list[str](), list[str]()
    for arg in argv:
        if arg in ("-h", "--help"):
            print(__doc__)
            raise SystemExit(0)
        key, _, value = arg.partition("=")
        if key == "adapt":
            name = value
        elif key == "stage":
            stages.extend(STAGES if value == "all" else [value])
        else:
            overrides.append(arg)
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise ConfigError([f"stage={s} is not one of all, {', '.join(STAGES)}" for s in bad], "bad arguments")
    return name, tuple(s for s in STAGES if s in stages) if stages else STAGES, overrides


def run_model_stages(cfg: AdaptConfig, stages: tuple[str, ...]) -> dict[str, str]:
    """pairs / train / merge here with progress bars, or as one submitit job (cluster=debug|slurm)."""
    if cluster_config(cfg.cluster).executor != "local":
        from jobs.adapt_job import launch

        return launch(cfg, stages)
    from tqdm import tqdm

    from streamgen.adapt.pipeline import run_stages

    answers = tqdm(desc="teacher answers", unit="req", disable=None)
    steps = tqdm(total=cfg.train.steps, desc="training", unit="step", disable=None)

    def on_step(p: object) -> None:
        steps.n = p.step  # type: ignore[attr-defined]
        steps.set_postfix(loss=f"{p.loss:.4f}", tok_s=f"{p.tokens_per_s:.0f}")  # type: ignore[attr-defined]
        if p.step % cfg.train.log_every == 0 or p.checkpoint:  # type: ignore[attr-defined]
            log.info("step %d/%d loss %.4f %.0f tok/s", p.step, p.steps, p.loss, p.tokens_per_s)  # type: ignore[attr-defined]

    try:
        return run_stages(cfg, stages, on_answer=answers.update, on_step=on_step)
    finally:
        answers.close()
        steps.close()


def evaluate(cfg: AdaptConfig) -> int:
    """The plain and the adapted model through the ordinary grid; prints Table 3."""
    from analysis.render import markdown
    from analysis.report import ADAPT
    from analysis.tables import build_tables
    from jobs.slurm import run

    overrides = [f"results_dir={cfg.out_dir / 'eval'}", *cfg.eval.overrides,
                 f"models=[{cfg.model},{cfg.adapted_name}]"]
    grid = grid_config(cfg.eval.grid, overrides)
    summary = run(grid)
    table = build_tables(grid.results_dir, ["adaptation"])["adaptation"]
    print(f"\nTable 3 — {cfg.model} → {cfg.adapted_name} ({cfg.variant}), results in {grid.results_dir}\n")
    print(markdown(table, ADAPT, blank_repeats="setting") if table.num_rows else "(no matched cells)")
    return 1 if getattr(summary, "shards_failed", []) else 0


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("streamgen").setLevel(logging.INFO)
    try:
        name, stages, overrides = parse_args(argv)
        cfg = adapt_config(name, overrides)
        raise_if_problems(validate_adapt(cfg), f"adaptation recipe {name!r} is invalid")
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        (cfg.out_dir / "adapt.yaml").write_text(to_yaml(cfg))
        log.info("recipe %s, stages %s:\n%s", name, ",".join(stages), to_yaml(cfg))
        model_stages = tuple(s for s in stages if s != "eval")
        if model_stages:
            for stage, path in run_model_stages(cfg, model_stages).items():
                print(f"{stage}: {path}")
        return evaluate(cfg) if "eval" in stages else 0
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
