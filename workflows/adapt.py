"""Adapt a model to incomplete requests (paper §7): pairs → LoRA training → merge → evaluate (Table 3).

Local (the smoke recipe: tiny random llama, the whole chain in under three minutes on CPU)::

    python workflows/adapt.py adapt=smoke
    python workflows/adapt.py adapt=smollm2-mbpp train.steps=60 source.limit=40   # a real, small run
    python workflows/adapt.py adapt=smoke stage=train train.steps=40              # one stage (resumes)
    python workflows/adapt.py adapt=smoke --dry-run    # validate, print the plan and the eval grid's; start nothing

Debug (the model stages through submitit's in-process DebugExecutor; breakpoints work)::

    python workflows/adapt.py adapt=smoke cluster=debug

Slurm (pairs + training + merge as one requeueable one-GPU job; evaluation is the grid's own Slurm job)::

    python workflows/adapt.py adapt=smollm2-mbpp cluster=slurm_a100

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
from streamgen.config import (  # noqa: E402
    ConfigError,
    GridConfig,
    grid_config,
    model_config,
    raise_if_problems,
    to_yaml,
)

log = logging.getLogger("adapt")
STAGES = ("pairs", "train", "merge", "eval")


def parse_args(argv: Sequence[str]) -> tuple[str, tuple[str, ...], list[str]]:
    name, stages, overrides = "smollm2-mbpp", list[str](), list[str]()
    for arg in argv:
        if arg == "--dry-run":
            continue  # read by main()
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
    from jobs.cluster.adapt_job import run

    return run(cfg, stages, here=lambda: run_here(cfg, stages))


def run_here(cfg: AdaptConfig, stages: tuple[str, ...]) -> dict[str, str]:
    """The model stages in this process, with progress bars."""
    from tqdm import tqdm

    from streamgen.adapt import checkpoint
    from streamgen.adapt.pipeline import run_stages
    from streamgen.adapt.sources import load_requests

    # each stage's bar has its total, so tqdm shows the ETA; a resumed stage starts at what is done
    requests = len(load_requests(cfg.source, cfg.data_dir)) if "pairs" in stages else None
    answers = tqdm(total=requests, desc="teacher answers", unit="req", disable=None)
    last = checkpoint.latest(cfg.out_dir / "checkpoints")
    steps = tqdm(total=cfg.train.steps, initial=last.step if last else 0, desc="training", unit="step",
                 disable=None)
    agreement = ""

    def on_step(p: object) -> None:
        steps.update(p.step - steps.n)  # type: ignore[attr-defined]
        steps.set_postfix_str(f"loss={p.loss:.4f} tok/s={p.tokens_per_s:.0f}{agreement}")  # type: ignore[attr-defined]
        if p.step % cfg.train.log_every == 0 or p.checkpoint:  # type: ignore[attr-defined]
            log.info("step %d/%d loss %.4f %.0f tok/s", p.step, p.steps, p.loss, p.tokens_per_s)  # type: ignore[attr-defined]

    def on_heldout(step: int, found: object) -> None:
        nonlocal agreement
        agreement = f" held-out={found.agreement:.3f}@{step}"  # type: ignore[attr-defined]

    from jobs.run import stop_signals

    # SIGTERM/SIGINT end the stage with one line (main's `ending`); a rerun resumes: teacher parts and
    # checkpoints are written atomically, and curve.jsonl is cut back to the newest checkpoint
    try:
        with stop_signals.catching():
            return run_stages(cfg, stages, on_answer=answers.update, on_step=on_step, on_heldout=on_heldout)
    finally:
        answers.close()
        steps.close()


def draw_curve(cfg: AdaptConfig) -> Path | None:
    """``<output.dir>/curve.png`` from the run's curve.jsonl (None when there is none yet)."""
    from analysis import curve_figure
    from streamgen.adapt.curve import CURVE_FILE, read_curve

    rows = read_curve(cfg.out_dir / CURVE_FILE)
    if not rows:
        return None
    path = cfg.out_dir / "curve.png"
    curve_figure(rows, path, title=f"{cfg.model} → {cfg.adapted_name}: loss and held-out draft agreement")
    return path


def evaluate(cfg: AdaptConfig) -> int:
    """The plain and the adapted model through the ordinary grid; prints Table 3."""
    from analysis import adaptation_summary
    from jobs.cluster.executors import run_grid_on_cluster

    grid = eval_grid(cfg)
    summary = run_grid_on_cluster(grid)
    print(f"\nTable 3 — {cfg.model} → {cfg.adapted_name} ({cfg.variant}), results in {grid.results_dir}\n")
    print(adaptation_summary(grid.results_dir))
    return 1 if getattr(summary, "shards_failed", []) else 0


def eval_grid(cfg: AdaptConfig, *, adapted: bool = True) -> GridConfig:
    """The evaluation grid: the plain model and (when it exists) the adapted one, results under the recipe's."""
    models = [cfg.model, cfg.adapted_name] if adapted else [cfg.model]
    return grid_config(cfg.eval.grid, [f"results_dir={cfg.out_dir / 'eval'}", *cfg.eval.overrides,
                                       f"models=[{','.join(models)}]"])


def dry_run(cfg: AdaptConfig, stages: tuple[str, ...]) -> int:
    """Print what the stages would do and the evaluation grid's plan; load no model, write nothing."""
    from jobs.cluster.dry_run import plan_dry_run

    try:
        model_config(cfg.adapted_name)
        adapted = True
    except ConfigError:
        adapted = False  # made by stage merge
    source = cfg.source.benchmark if cfg.source.kind == "benchmark" else (cfg.source.hub_id or cfg.source.data_file)
    print(f"dry run of adaptation recipe {cfg.name!r}: stages {', '.join(stages)}\n"
          f"  {cfg.model} → {cfg.adapted_name} (variant {cfg.variant}), output {cfg.out_dir}\n"
          f"  pairs: {cfg.pairs.variant}, target {cfg.pairs.target}, source {cfg.source.kind}:{source} "
          f"(limit {cfg.source.limit})\n"
          f"  training: {cfg.train.steps} steps × {cfg.train.effective_batch} sequences, lr {cfg.train.learning_rate:g}, "
          f"LoRA rank {cfg.lora.rank} α {cfg.lora.alpha}\n"
          + ("" if adapted else f"  {cfg.adapted_name} does not exist yet (stage merge makes it): the evaluation "
                                "plan below covers the plain model only\n"))
    grid = eval_grid(cfg, adapted=adapted)
    print(plan_dry_run(grid))
    print(time_estimate(cfg, stages, grid, adapted))
    return 0


def time_estimate(cfg: AdaptConfig, stages: tuple[str, ...], grid: GridConfig, adapted: bool) -> str:
    """The stages' time estimate (``streamgen.adapt.estimate``); the eval grid's pairs of runs are
    doubled while the adapted model does not exist yet (its plan covers the plain model only)."""
    from jobs.grid.plan import plan_grid
    from streamgen.adapt.estimate import estimate, render
    from streamgen.adapt.sources import load_requests

    examples = sum(len(s) for s in plan_grid(grid).shards) * (1 if adapted else 2)
    return render(estimate(cfg, load_requests(cfg.source, cfg.data_dir), stages, examples, grid.workers))


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("streamgen").setLevel(logging.INFO)
    from jobs.run.stop_signals import RunInterrupted, ending
    from streamgen.results.results_dir import ResultsDirError

    try:
        name, stages, overrides = parse_args(argv)
        cfg = adapt_config(name, overrides)
        raise_if_problems(validate_adapt(cfg), f"adaptation recipe {name!r} is invalid")
        if "--dry-run" in argv:
            return dry_run(cfg, stages)
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        (cfg.out_dir / "adapt.yaml").write_text(to_yaml(cfg))
        log.info("recipe %s, stages %s:\n%s", name, ",".join(stages), to_yaml(cfg))
        model_stages = tuple(s for s in stages if s != "eval")
        if model_stages:
            for stage, path in run_model_stages(cfg, model_stages).items():
                print(f"{stage}: {path}")
            if "train" in model_stages and (figure := draw_curve(cfg)) is not None:
                print(f"training curve: {figure}")
        return evaluate(cfg) if "eval" in stages else 0
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    except (ResultsDirError, RunInterrupted) as exc:  # disk full, read-only, locked; SIGTERM/SIGINT
        line, code = ending(exc, "teacher answers, checkpoints and finished shards are kept")
        print(line, file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
