"""The training curve (streamgen.adapt.curve): teacher-forced draft agreement equals what greedy
decoding from the prefix keeps; held-out requests never train; an interrupted run's curve and adapter
equal the uninterrupted run's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from streamgen.adapt import checkpoint, curve
from streamgen.adapt.config import adapt_config
from streamgen.adapt.pairs import TrainingPair
from streamgen.adapt.pipeline import make_pairs, read_pairs, train_adapter
from streamgen.adapt.train import EncodedPair
from streamgen.config import ConfigError, model_config
from streamgen.models.weights import load_model_and_tokenizer


def _greedy(model, prompt: list[int], n: int) -> list[int]:
    """The reference: n greedy tokens decoded one at a time (no cache, no batching)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.fixture(scope="module")
def tiny():
    return load_model_and_tokenizer(model_config("tiny-llama")).model.eval()


def test_teacher_forced_agreement_is_the_greedy_drafts_leading_run(tiny) -> None:
    """Targets built from the model's own greedy continuation with one token changed at position k:
    a greedy draft keeps exactly k tokens, so the leading run is k (k = length: kept whole)."""
    length, vocab = 6, tiny.config.vocab_size
    prompts = [[3 + i, 40 + 2 * i, 7, 90 + i, 11 + i] for i in range(5)]
    cuts = [0, 2, 5, 6, 3]  # where the target leaves the greedy continuation (6: never)
    pairs = []
    for prompt, k in zip(prompts, cuts, strict=True):
        target = _greedy(tiny, prompt, length)
        if k < length:
            target[k] = (target[k] + 1) % vocab
        pairs.append(EncodedPair(tuple(prompt + target), len(prompt)))
    found = curve.agreement(tiny, pairs, pad_id=0, device="cpu", batch=2)  # batched, right-padded
    assert found.pairs == 5 and found.answer_tokens == 5 * length
    assert found.agreement == pytest.approx(sum(cuts) / (5 * length))
    assert found.first_token == pytest.approx(sum(k > 0 for k in cuts) / 5)
    assert found.whole == pytest.approx(sum(k == length for k in cuts) / 5)


def _pair(request_id: str, i: int, n: int) -> TrainingPair:
    return TrainingPair(request_id, i, n, 10 * i, "[]", None, "", "[1]", "teacher")


def test_the_last_requests_are_held_out_and_only_their_incomplete_prefixes_measure() -> None:
    pairs = [_pair(r, i, 3) for r in ("a", "b", "c") for i in (1, 2, 3)]
    train, held = curve.split_heldout(pairs, 1)
    assert {p.request_id for p in train} == {"a", "b"} and len(train) == 6
    assert [(p.request_id, p.prefix_index) for p in held] == [("c", 1), ("c", 2)]
    assert curve.split_heldout(pairs, 0) == (pairs, [])
    with pytest.raises(ConfigError, match="curve.heldout=3"):
        curve.split_heldout(pairs, 3)


def _recipe(out: Path, *extra: str):
    return adapt_config("smoke", [f"output.dir={out}", "curve.heldout=2", "train.steps=12",
                                  "train.save_every=4", *extra])


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pairs")
    return make_pairs(_recipe(out))


def _with_pairs(out: Path, pairs_file: Path) -> Path:
    out.mkdir(parents=True)
    shutil.copy(pairs_file, out / pairs_file.name)
    return out


@pytest.fixture(scope="module")
def uninterrupted(pairs_file, tmp_path_factory) -> Path:
    out = _with_pairs(tmp_path_factory.mktemp("full") / "run", pairs_file)
    train_adapter(_recipe(out))
    return out


def test_the_curve_has_every_steps_loss_and_an_evaluation_at_each_checkpoint(uninterrupted) -> None:
    rows = curve.read_curve(uninterrupted / curve.CURVE_FILE)
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, 13))
    evaluated = [r for r in rows if "heldout_agreement" in r]
    assert [r["step"] for r in evaluated] == [0, 4, 8, 12]  # the plain model, then every checkpoint
    pairs = read_pairs(_recipe(uninterrupted))
    held_ids = list(dict.fromkeys(p.request_id for p in pairs))[-2:]
    held = [p for p in pairs if p.request_id in held_ids and p.prefix_index < p.n_segments]
    assert held and all(r["heldout_pairs"] == len(held) for r in evaluated)
    record = json.loads((uninterrupted / "train.json").read_text())
    assert record["pairs"] + record["pairs_skipped"] == sum(p.request_id not in held_ids for p in pairs)
    assert len({r["heldout_agreement"] for r in evaluated}) > 1, "training must move the measure (lr 5e-3)"


class _Stop(Exception):
    pass


def test_an_interrupted_run_resumes_to_the_same_curve_and_adapter(uninterrupted, pairs_file, tmp_path) -> None:
    out = _with_pairs(tmp_path / "run", pairs_file)

    def stop_at_6(progress) -> None:
        if progress.step == 6:  # after checkpoint 4, before checkpoint 8
            raise _Stop

    with pytest.raises(_Stop):
        train_adapter(_recipe(out), on_step=stop_at_6)
    assert checkpoint.latest(out / "checkpoints").step == 4  # type: ignore[union-attr]
    assert [r["step"] for r in curve.read_curve(out / curve.CURVE_FILE) if "loss" in r] == list(range(1, 7))
    train_adapter(_recipe(out))  # resumes from step 4: steps 5 and 6 are recomputed, not duplicated
    assert (out / curve.CURVE_FILE).read_text() == (uninterrupted / curve.CURVE_FILE).read_text()
    final = checkpoint.latest(out / "checkpoints")
    reference = checkpoint.latest(uninterrupted / "checkpoints")
    assert final is not None and reference is not None and final.step == reference.step == 12
    assert (final.path / checkpoint.ADAPTER_FILE).read_bytes() == (reference.path / checkpoint.ADAPTER_FILE).read_bytes()


def test_a_run_stopped_right_after_a_checkpoint_gets_that_steps_loss_line_back(uninterrupted, tmp_path) -> None:
    path = tmp_path / curve.CURVE_FILE
    rows = curve.read_curve(uninterrupted / curve.CURVE_FILE)
    last = checkpoint.latest(uninterrupted / "checkpoints")
    assert last is not None
    curve.write_rows(path, [r for r in rows if r["step"] < last.step or (r["step"] == last.step and "loss" not in r)])
    curve.resume(path, last)
    assert curve.read_curve(path) == [r for r in rows if r["step"] <= last.step]


def test_running_mean_by_hand() -> None:
    from analysis.training_curve import running_mean

    assert running_mean([4.0, 2.0, 6.0, 0.0], 2) == [4.0, 3.0, 4.0, 3.0]
    assert running_mean([1.0, 2.0, 3.0], 10) == [1.0, 1.5, 2.0]


def test_the_figure_draws_the_curves_rows(uninterrupted, tmp_path) -> None:
    from analysis.training_curve import curve_figure, main

    rows = curve.read_curve(uninterrupted / curve.CURVE_FILE)
    fig = curve_figure(rows, tmp_path / "curve.png", window=3)
    top, bottom = fig.axes
    step_loss = top.lines[0].get_xydata().tolist()
    assert step_loss == [[r["step"], r["loss"]] for r in rows if "loss" in r]
    agreement = bottom.lines[0].get_xydata().tolist()
    assert agreement == [[r["step"], r["heldout_agreement"]] for r in rows if "heldout_agreement" in r]
    assert (tmp_path / "curve.png").stat().st_size > 10_000
    assert main([str(tmp_path / "missing.jsonl"), str(tmp_path / "x.png")]) == 2
    assert main([str(uninterrupted / curve.CURVE_FILE), str(tmp_path / "cli.png")]) == 0
    assert (tmp_path / "cli.png").is_file()


def test_a_line_cut_off_mid_write_is_left_out(tmp_path) -> None:
    path = tmp_path / curve.CURVE_FILE
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo')
    assert curve.read_curve(path) == [{"step": 1, "loss": 2.0}]
    curve.resume(path, None)  # a fresh start (no checkpoint) keeps nothing past step 0
    assert curve.read_curve(path) == [] and path.read_text() == ""


def test_a_run_stopped_before_its_checkpoints_evaluation_evaluates_the_checkpoint(uninterrupted, pairs_file,
                                                                                  tmp_path) -> None:
    """Killed between writing checkpoint 8 and its held-out line: the resumed run measures checkpoint
    8's weights (not the fresh adapter's), so the curve still equals the uninterrupted run's."""
    out = _with_pairs(tmp_path / "run", pairs_file)
    reference = curve.read_curve(uninterrupted / curve.CURVE_FILE)
    at = {r["step"]: r["heldout_agreement"] for r in reference if "heldout_agreement" in r}
    assert at[8] != at[0], "checkpoint 8 must measure differently from the plain model for this test to mean anything"

    def stop_at_8(progress) -> None:
        if progress.step == 8:
            raise _Stop

    with pytest.raises(_Stop):
        train_adapter(_recipe(out), on_step=stop_at_8)
    path = out / curve.CURVE_FILE
    curve.write_rows(path, [r for r in curve.read_curve(path) if not (r["step"] == 8 and "heldout_agreement" in r)],
                     mode="w")
    train_adapter(_recipe(out))
    assert path.read_text() == (uninterrupted / curve.CURVE_FILE).read_text()
