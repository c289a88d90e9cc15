"""The training curve: loss at every step and held-out draft agreement at every checkpoint.

**Held-out requests.** ``curve.heldout = N`` keeps the last N requests of the source (after
``source.limit``) out of training; their incomplete-prefix pairs (prefix i < n) measure how far the
model's early drafts already agree with the answer to the complete request.

**Draft agreement, teacher-forced.** For one held-out pair (prompt = the request's first i
sentences, target = the teacher's answer to the whole request), one forward over prompt + target
gives the model's greedy choice at every answer position given the target's earlier tokens. The
greedy draft the model would write from that prefix equals the target exactly up to the first
position where that choice differs, so the *leading run* of matching positions is the number of
draft tokens a greedy verify against the teacher's answer keeps — computed with one forward instead
of a decode. Reported per checkpoint: ``agreement`` = Σ leading run / Σ answer tokens, ``first_token``
= share of pairs whose first answer token agrees, ``whole`` = share whose whole answer agrees.
The measure is against the *plain* model's answer (the teacher): an adapted model whose own complete
answer moved would verify against that instead (the evaluation grid measures that end to end).

``curve.jsonl`` (under the recipe's output folder) has one line per optimizer step
(``step``, ``loss``, ``learning_rate``, ``tokens``) and one per evaluation (``step``, ``heldout_*``),
step 0 being the plain model. A resumed run first drops the lines past its checkpoint, so the file
of an interrupted and resumed run equals the uninterrupted run's (timings aside: none are stored).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.adapt.checkpoint import Checkpoint
from streamgen.adapt.pairs import TrainingPair
from streamgen.adapt.train import EncodedPair, collate
from streamgen.config import ConfigError
from streamgen.decoding.base import common_prefix_length

CURVE_FILE = "curve.jsonl"


def split_heldout(pairs: Sequence[TrainingPair], heldout: int) -> tuple[list[TrainingPair], list[TrainingPair]]:
    """(training pairs, held-out incomplete-prefix pairs): the last ``heldout`` request ids are held out."""
    order = list(dict.fromkeys(p.request_id for p in pairs))
    if heldout and heldout >= len(order):
        raise ConfigError([f"curve.heldout={heldout} but the pairs come from {len(order)} requests: hold out "
                           "fewer (or raise source.limit) so some remain to train on"], "nothing to train on")
    kept_out = set(order[len(order) - heldout:]) if heldout else set()
    train = [p for p in pairs if p.request_id not in kept_out]
    held = [p for p in pairs if p.request_id in kept_out and p.prefix_index < p.n_segments]
    return train, held


@dataclass(frozen=True)
class Agreement:
    pairs: int
    answer_tokens: int
    agreement: float  # Σ leading run / Σ answer tokens
    first_token: float  # share of pairs whose first answer token agrees
    whole: float  # share of pairs whose whole answer agrees

    def as_row(self, step: int) -> dict[str, Any]:
        return {"step": step, "heldout_pairs": self.pairs, "heldout_answer_tokens": self.answer_tokens,
                "heldout_agreement": self.agreement, "heldout_first_token": self.first_token,
                "heldout_whole": self.whole}


def agreement(model: Any, pairs: Sequence[EncodedPair], *, pad_id: int, device: Any, batch: int = 2) -> Agreement:
    """Teacher-forced draft agreement of ``model`` on ``pairs`` (module docstring); no gradients, eval mode."""
    import torch


    runs: list[tuple[int, int]] = []  # (leading run, answer tokens)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for k in range(0, len(pairs), batch):
                chunk = pairs[k:k + batch]
                inputs = collate(chunk, pad_id, device)
                logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
                choice = logits.argmax(dim=-1).tolist()
                for row, p in enumerate(chunk):
                    # position t's logits choose token t + 1: answer tokens n_prompt.. are chosen at n_prompt - 1..
                    predicted = choice[row][p.n_prompt - 1:len(p.input_ids) - 1]
                    runs.append((common_prefix_length(predicted, p.input_ids[p.n_prompt:]), p.n_answer))
    finally:
        model.train(was_training)
    n, tokens = len(runs), sum(t for _, t in runs)
    return Agreement(n, tokens, sum(r for r, _ in runs) / max(tokens, 1),
                     sum(r > 0 for r, _ in runs) / max(n, 1), sum(r == t for r, t in runs) / max(n, 1))


def read_curve(path: Path) -> list[dict[str, Any]]:
    """The file's rows; a last line without its newline (a run killed mid-write) is left out."""
    if not path.is_file():
        return []
    text = path.read_text()
    lines = text.split("\n")
    complete = lines if text.endswith("\n") else lines[:-1]
    return [json.loads(line) for line in complete if line.strip()]


def resume(path: Path, last: Checkpoint | None) -> None:
    """Keep only the lines of steps up to the checkpoint training resumes from (the rest is recomputed);
    a run stopped between writing that checkpoint and its loss line gets the line from the checkpoint."""
    step = last.step if last is not None else 0
    rows = [r for r in read_curve(path) if r["step"] <= step]
    if last is not None and not any(r["step"] == step and "loss" in r for r in rows):
        state = last.state
        rows.append({"step": step, "loss": state["loss"], "learning_rate": state["learning_rate"],
                     "tokens": state["tokens"]})
    write_rows(path, sorted(rows, key=lambda r: (r["step"], "loss" not in r)), mode="w")


def write_rows(path: Path, rows: Iterable[dict[str, Any]], *, mode: str = "a") -> None:
    with path.open(mode) as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()


def has_evaluation(path: Path, step: int) -> bool:
    return any(r["step"] == step and "heldout_agreement" in r for r in read_curve(path))
