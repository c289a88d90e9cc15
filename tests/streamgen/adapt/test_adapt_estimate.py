"""The --dry-run time estimate (streamgen.adapt.estimate): exact counts times the recipe's rates,
aware of what a resumed run has already done."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamgen.adapt.config import adapt_config
from streamgen.adapt.estimate import count_pairs, estimate
from streamgen.adapt.sources import TrainingRequest
from streamgen.config import REPO_ROOT

REQUESTS = [  # 3, 1 and 2 sentences
    TrainingRequest("a", "Add two numbers. Return the sum. Use hints."),
    TrainingRequest("b", "Sort a list."),
    TrainingRequest("c", "Count vowels. Return an int."),
]


def test_pairs_are_counted_from_the_sentences() -> None:
    # training: a gives prefixes 1, 2 and the complete 3; b (one sentence) none; held out c: its prefix 1
    assert count_pairs(REQUESTS, 1, include_complete=True) == (3 + 0, 1)
    assert count_pairs(REQUESTS, 0, include_complete=False) == (2 + 0 + 1, 0)


def _cfg(out: Path, *extra: str):
    return adapt_config("smoke", [f"output.dir={out}", "curve.heldout=1", "train.steps=20", "train.save_every=5",
                                  "train.effective_batch=4", "estimate.teacher_tokens_per_s=10",
                                  "estimate.teacher_answer_tokens=50", "estimate.train_s_per_sequence=2",
                                  "estimate.heldout_s_per_pair=3", "estimate.eval_s_per_example=7", *extra])


def test_each_stage_is_its_counts_times_its_rates(tmp_path: Path) -> None:
    stages = estimate(_cfg(tmp_path), REQUESTS, ("pairs", "train", "eval"), eval_examples=12)
    by = {s.stage: s.seconds for s in stages}
    assert by["pairs"] == pytest.approx(3 * 50 / 10)
    # 20 steps × 4 sequences × 2 s, plus evaluations at steps 0, 5, 10, 15, 20 of 1 held-out pair × 3 s
    assert by["train"] == pytest.approx(20 * 4 * 2 + 5 * 1 * 3)
    assert by["eval"] == pytest.approx(12 * 7)


def test_the_evaluation_divides_over_the_grids_actors(tmp_path: Path) -> None:
    one, = estimate(_cfg(tmp_path), REQUESTS, ("eval",), eval_examples=12)
    two, = estimate(_cfg(tmp_path), REQUESTS, ("eval",), eval_examples=12, eval_workers=2)
    assert (one.seconds, two.seconds) == pytest.approx((12 * 7, 12 * 7 / 2))
    assert "2 actors side by side" in two.work and "actors" not in one.work


def test_a_resumed_run_is_estimated_from_its_newest_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "step-000010").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-000010" / "state.json").write_text("{}")
    stages = estimate(_cfg(tmp_path), REQUESTS, ("train",), eval_examples=0)
    assert stages[0].seconds == pytest.approx(10 * 4 * 2 + 2 * 1 * 3)  # steps 11–20; evaluations at 15 and 20
    assert "10 of 20 steps" in stages[0].work


def test_the_dry_run_prints_the_estimate(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "workflows/adapt.py", "adapt=smoke", "--dry-run",
                          f"output.dir={tmp_path}", "curve.heldout=2"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "time estimate" in out.stdout and "total" in out.stdout
    assert not (tmp_path / "adapt.yaml").exists()  # a dry run writes nothing
    bad = subprocess.run([sys.executable, "workflows/adapt.py", "adapt=smoke", "--dry-run", "curve.heldout=6"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "curve.heldout=6 leaves no training request" in bad.stderr
    assert "Traceback" not in bad.stderr
