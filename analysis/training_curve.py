"""The adaptation run's training curve as a figure: loss against steps (each step, and a running
mean over ``window`` steps) above held-out draft agreement against steps (the share of the teacher's
answer a greedy draft from an incomplete prefix keeps, and the share of prefixes whose whole answer
agrees; ``streamgen.adapt.curve`` defines both). Reads ``curve.jsonl``; Agg canvas, no pyplot.

    python -m analysis.training_curve results/adapt/smollm2-cpu/curve.jsonl docs/adapt-smollm2-cpu-curve.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from analysis.figure_pool import new_figure
from analysis.figure_pool import save as _save


def running_mean(values: Sequence[float], window: int) -> list[float]:
    """Mean of the last ``window`` values at each position (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def curve_figure(rows: Sequence[dict[str, Any]], path: Path, *, title: str = "", window: int = 10) -> Figure:
    """Draw the curve of ``rows`` (curve.jsonl's lines) to ``path``; returns the figure."""
    losses = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "heldout_agreement" in r]
    if not losses and not evals:
        raise ValueError("the curve has no rows: train first (stage=train)")
    fig = new_figure((7.0, 6.0))
    top, bottom = fig.subplots(2, 1, sharex=True)
    steps = [r["step"] for r in losses]
    top.plot(steps, [r["loss"] for r in losses], color="0.7", linewidth=0.8, label="step loss")
    top.plot(steps, running_mean([r["loss"] for r in losses], window), color="C0", linewidth=2.0,
             label=f"mean of {window} steps")
    top.set_ylabel("training loss (answer tokens)")
    top.legend(fontsize=8)
    at = [r["step"] for r in evals]
    bottom.plot(at, [r["heldout_agreement"] for r in evals], marker="o", color="C1",
                label="draft tokens kept (Σ leading run / Σ answer)")
    bottom.plot(at, [r["heldout_whole"] for r in evals], marker="s", color="C2", linestyle="--",
                label="prefixes whose whole answer agrees")
    bottom.set_ylim(0.0, 1.0)
    bottom.set_xlabel("optimizer step (0: the plain model)")
    n = evals[0]["heldout_pairs"] if evals else 0
    bottom.set_ylabel(f"held-out agreement ({n} prefixes)")
    bottom.legend(fontsize=8)
    top.set_title(title or "Adaptation: training loss and held-out draft agreement", fontsize=10)
    _save(fig, path)
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw an adaptation run's curve.jsonl as a PNG.")
    parser.add_argument("curve", type=Path, help="the run's curve.jsonl (under the recipe's output.dir)")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--window", type=int, default=10, help="steps in the loss's running mean (default 10)")
    args = parser.parse_args(argv)
    if not args.curve.is_file():
        print(f"error: {args.curve} does not exist: run the train stage first", file=sys.stderr)
        return 2
    try:
        rows = [json.loads(line) for line in args.curve.read_text().splitlines() if line.strip()]
        curve_figure(rows, args.out, window=args.window)
    except json.JSONDecodeError as exc:
        print(f"error: {args.curve} is not a curve.jsonl ({exc}): rerun the train stage, which rewrites it",
              file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
