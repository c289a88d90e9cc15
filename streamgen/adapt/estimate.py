"""How long a recipe will take, before it starts (``workflows/adapt.py --dry-run``).

Counts are exact where they can be known without a model: the requests and their sentence prefixes
(so the training and held-out pairs), what the teacher cache and the newest checkpoint already hold,
the evaluation grid's examples. Rates come from the recipe's ``estimate`` section (measured on the
machine that will run; docs/experiments.md says how they were measured for ``smollm2-cpu``); the
teacher's answer length is ``estimate.teacher_answer_tokens`` or, unset, ``pairs.max_new_tokens`` (an
upper bound). The estimate is what it says: counts times rates, shown as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamgen.adapt import checkpoint
from streamgen.adapt.config import AdaptConfig
from streamgen.adapt.pairs import prefix_indices
from streamgen.adapt.sources import TrainingRequest
from streamgen.requests.segment import SentenceSegmenter


@dataclass(frozen=True)
class StageEstimate:
    stage: str
    work: str  # what is counted, in words
    seconds: float


def count_pairs(requests: list[TrainingRequest], heldout: int, include_complete: bool) -> tuple[int, int]:
    """(training pairs, held-out incomplete-prefix pairs) the pairs stage will build."""
    segmenter = SentenceSegmenter()
    sizes = [len(segmenter(r.request)) for r in requests]
    cut = len(sizes) - heldout
    train = sum(len(prefix_indices(n, include_complete)) for n in sizes[:cut])
    held = sum(len(prefix_indices(n, False)) for n in sizes[cut:])
    return train, held


def cached_answers(cfg: AdaptConfig) -> int:
    """Teacher answers already in any cache folder of the recipe's output (an upper bound on reuse)."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in Path(cfg.out_dir).glob("teacher-*/part-*.parquet"))


def estimate(cfg: AdaptConfig, requests: list[TrainingRequest], stages: tuple[str, ...],
             eval_examples: int, eval_workers: int = 1) -> list[StageEstimate]:
    """Per-stage estimates for ``stages`` (``eval_examples``: (model, example, setting) pairs of runs;
    ``eval_workers``: the grid's model actors, one thread each, running side by side — the machine
    needs that many free cores for the division to hold)."""
    rates, out = cfg.estimate, []
    train_pairs, held_pairs = count_pairs(requests, cfg.curve.heldout, cfg.pairs.include_complete)
    if "pairs" in stages:
        todo = max(len(requests) - cached_answers(cfg), 0)
        tokens = rates.teacher_answer_tokens or cfg.pairs.max_new_tokens
        out.append(StageEstimate("pairs", f"{todo} of {len(requests)} teacher answers × {tokens} tokens at "
                                          f"{rates.teacher_tokens_per_s:g} tokens/s", todo * tokens / rates.teacher_tokens_per_s))
    if "train" in stages:
        last = checkpoint.latest(Path(cfg.out_dir) / "checkpoints")
        done = last.step if last is not None else 0
        steps = max(cfg.train.steps - done, 0)
        evals = 0 if not held_pairs else (1 if done == 0 else 0) + len(
            [s for s in range(done + 1, cfg.train.steps + 1) if s % cfg.train.save_every == 0 or s == cfg.train.steps])
        seconds = steps * cfg.train.effective_batch * rates.train_s_per_sequence
        seconds += evals * held_pairs * rates.heldout_s_per_pair
        out.append(StageEstimate("train", f"{steps} of {cfg.train.steps} steps × {cfg.train.effective_batch} "
                                          f"sequences at {rates.train_s_per_sequence:g} s (from {train_pairs} pairs); "
                                          f"{evals} held-out evaluations × {held_pairs} pairs at "
                                          f"{rates.heldout_s_per_pair:g} s", seconds))
    if "eval" in stages:
        side_by_side = f" on {eval_workers} actors side by side" if eval_workers > 1 else ""
        out.append(StageEstimate("eval", f"{eval_examples} example runs (base + stream) at "
                                         f"{rates.eval_s_per_example:g} s{side_by_side}",
                                 eval_examples * rates.eval_s_per_example / eval_workers))
    return out


def render(estimates: list[StageEstimate]) -> str:
    lines = ["time estimate (counts × the recipe's estimate.* rates):"]
    for e in estimates:
        lines.append(f"  {e.stage:<6} ~{e.seconds / 60:6.1f} min   {e.work}")
    lines.append(f"  total  ~{sum(e.seconds for e in estimates) / 60:6.1f} min")
    return "\n".join(lines)
