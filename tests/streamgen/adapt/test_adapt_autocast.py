"""``train.autocast=bf16`` on the tiny random llama: the forward runs in bfloat16 while the trained state
stays float32, the losses track float32's, and a checkpoint keeps the precision a resume must match."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from streamgen.adapt import checkpoint
from streamgen.adapt.config import TrainSettings, adapt_config, validate_adapt
from streamgen.adapt.pipeline import training_record
from streamgen.adapt.train import EncodedSet, encode_pairs, forward_precision, lora_model, summed_loss, train
from streamgen.config import ConfigError
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from tests.streamgen.adapt.test_adapt import FAST, LORA, _pairs, fresh_model

BF16 = dataclasses.replace(FAST, steps=4, save_every=2, autocast="bf16")
FP32 = dataclasses.replace(BF16, autocast="none")
WATCHED = ("layers.0.mlp.down_proj", "layers.0.self_attn.q_proj")  # a frozen Linear and a LoRA-wrapped one


@dataclass(frozen=True)
class Run:
    model: Any  # the PeftModel after training
    losses: list[float]
    output_dtypes: dict[str, set[torch.dtype]]  # per WATCHED module, the dtypes its training forwards produced
    grad_dtypes: set[torch.dtype]  # of the LoRA parameters' gradients
    ckpt_dir: Path


def _run(ckpt_dir: Path, cfg: TrainSettings) -> Run:
    """Train the tiny llama's LoRA (seeded init, the pairs of tests/streamgen/adapt/test_adapt.py), watching dtypes."""
    loaded = fresh_model()
    render = AutoregressiveDecoder(loaded.model, loaded.tokenizer).render
    data = encode_pairs(_pairs(), render, lambda t: [], 0, cfg.max_length)
    model = lora_model(loaded.model, LORA, cfg.seed)
    outputs: dict[str, set[torch.dtype]] = {w: set() for w in WATCHED}
    for name, module in model.named_modules():
        for w in WATCHED:
            if name.endswith(w):
                module.register_forward_hook(lambda _m, _i, out, w=w: outputs[w].add(out.dtype))
    grads: set[torch.dtype] = set()
    for p in model.parameters():
        if p.requires_grad:
            p.register_hook(lambda g: grads.add(g.dtype))
    losses = [p.loss for p in train(model, data, cfg, ckpt_dir, pad_id=0, device="cpu")]
    return Run(model, losses, outputs, grads, ckpt_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    """The same 4 steps from the same initialisation and data order, in float32 and in bf16 autocast."""
    return {cfg.autocast: _run(tmp_path_factory.mktemp(cfg.autocast), cfg) for cfg in (FP32, BF16)}


def _lora(model: Any) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.named_parameters() if "lora_" in k}


def test_the_autocast_knob_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    problems = validate_adapt(adapt_config("smoke", ["train.autocast=fp16"]))
    assert any("train.autocast='fp16' must be one of ('none', 'bf16')" in p for p in problems), problems
    assert not any("autocast" in p for p in validate_adapt(adapt_config("smoke", ["train.autocast=bf16"])))
    forward_precision("bf16", "cpu")  # torch autocasts bfloat16 on every CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="train.autocast=bf16 on device cuda: .* cannot autocast bfloat16"):
        forward_precision("bf16", "cuda")


def test_bf16_runs_the_forward_in_bfloat16_and_the_loss_reduction_in_float32(runs) -> None:
    assert runs["bf16"].output_dtypes == {w: {torch.bfloat16} for w in WATCHED}
    assert runs["none"].output_dtypes == {w: {torch.float32} for w in WATCHED}
    model = runs["bf16"].model
    batch = {"input_ids": torch.tensor([[1, 2, 3, 4]]), "attention_mask": torch.ones(1, 4, dtype=torch.long),
             "labels": torch.tensor([[-100, 2, 3, 4]])}
    with forward_precision("bf16", "cpu")():
        assert model(input_ids=batch["input_ids"]).logits.dtype == torch.bfloat16
        assert summed_loss(model, batch).dtype == torch.float32  # the logits are cast up before the reduction


def test_bf16_keeps_the_lora_weights_gradients_and_adamw_state_float32(runs) -> None:
    run = runs["bf16"]
    assert {v.dtype for v in _lora(run.model).values()} == {torch.float32}
    assert run.grad_dtypes == {torch.float32}
    last = checkpoint.latest(run.ckpt_dir)
    assert last is not None and last.state["autocast"] == "bf16"
    opt = torch.load(last.path / checkpoint.TRAINER_FILE, weights_only=True)["optimizer"]["state"]
    moments = [t for s in opt.values() for key, t in s.items() if key in ("exp_avg", "exp_avg_sq")]
    assert moments and {t.dtype for t in moments} == {torch.float32}


def test_bf16_losses_track_float32_without_being_float32(runs) -> None:
    fp32, bf16 = runs["none"].losses, runs["bf16"].losses
    assert len(fp32) == len(bf16) == 4
    for step, (a, b) in enumerate(zip(fp32, bf16, strict=True), 1):
        assert abs(b - a) / a < 5e-3, f"step {step}: bf16 loss {b} vs float32 {a}"  # measured: 1e-4 to 4e-4
    assert fp32 != bf16, "bit-identical losses: the bf16 path was not taken"


def test_the_training_record_names_the_autocast() -> None:
    cfg = adapt_config("smoke", ["train.autocast=bf16"])
    assert training_record(cfg, EncodedSet((), 0), "cpu")["autocast"] == "bf16"  # train.json's top level


def test_a_resume_with_another_autocast_is_refused(runs, tmp_path: Path) -> None:
    half = dataclasses.replace(BF16, steps=2)
    _run(tmp_path, half)
    with pytest.raises(ConfigError, match=r"trained with train.autocast=bf16 but this run sets train.autocast=none"
                                          r".*Set train.autocast=bf16 to resume it"):
        _run(tmp_path, dataclasses.replace(half, autocast="none", steps=4))
    # A checkpoint written before the knob existed was trained in float32: bf16 may not resume it either.
    state = checkpoint.latest(tmp_path).path / checkpoint.STATE_FILE  # type: ignore[union-attr]
    state.write_text(json.dumps({k: v for k, v in json.loads(state.read_text()).items() if k != "autocast"}))
    with pytest.raises(ConfigError, match="trained with train.autocast=none but this run sets train.autocast=bf16"):
        _run(tmp_path, dataclasses.replace(half, steps=4))


def test_a_resumed_bf16_run_equals_the_uninterrupted_bf16_run(runs, tmp_path: Path) -> None:
    _run(tmp_path, dataclasses.replace(BF16, steps=2))  # stops at a checkpoint
    assert checkpoint.latest(tmp_path).step == 2  # type: ignore[union-attr]
    resumed = _run(tmp_path, BF16)  # same folder, 4 steps: restarts from step 2
    assert len(resumed.losses) == 2 and resumed.losses == runs["bf16"].losses[2:]
    full = _lora(runs["bf16"].model)
    for k, v in _lora(resumed.model).items():
        torch.testing.assert_close(v, full[k], rtol=0, atol=1e-6)
