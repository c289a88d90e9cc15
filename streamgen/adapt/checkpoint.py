"""Training checkpoints: the LoRA weights, optimizer and schedule state, written atomically.

``<ckpt_dir>/step-NNNNNN/`` holds ``adapter.safetensors`` (the LoRA parameters only), ``trainer.pt``
(optimizer + scheduler state) and ``state.json`` (step, seed, recent losses). A checkpoint is built in
a temporary folder and renamed into place, so a run killed mid-save leaves either the previous
checkpoint or the new one, never half of one; :func:`latest` ignores temporary folders. The training
data order and dropout noise are functions of (seed, step), so resuming from step k reproduces the
uninterrupted run exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADAPTER_FILE = "adapter.safetensors"
TRAINER_FILE = "trainer.pt"
STATE_FILE = "state.json"


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int  # optimizer steps completed

    @property
    def state(self) -> dict[str, Any]:
        return dict(json.loads((self.path / STATE_FILE).read_text()))


def latest(ckpt_dir: Path) -> Checkpoint | None:
    """The most advanced complete checkpoint under ``ckpt_dir`` (None when there is none)."""
    found = [Checkpoint(p, int(p.name.split("-")[1])) for p in ckpt_dir.glob("step-*")
             if p.is_dir() and (p / STATE_FILE).is_file()]
    return max(found, key=lambda c: c.step, default=None)


def save(ckpt_dir: Path, step: int, model: Any, optimizer: Any, scheduler: Any, state: dict[str, Any],
         keep: int) -> Checkpoint:
    """Write checkpoint ``step`` atomically and keep only the newest ``keep``."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    ckpt_dir.mkdir(parents=True, exist_ok=True)
    target = ckpt_dir / f"step-{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=ckpt_dir))
    try:
        weights = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model).items()}
        save_file(weights, str(tmp / ADAPTER_FILE))
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp / TRAINER_FILE)
        (tmp / STATE_FILE).write_text(json.dumps({**state, "step": step}, indent=1, sort_keys=True))
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in sorted(ckpt_dir.glob("step-*"))[:-keep]:
        shutil.rmtree(old)
    return Checkpoint(target, step)


def load_adapter(ckpt: Checkpoint, model: Any) -> None:
    """Put the checkpoint's LoRA weights into ``model`` (a PeftModel); unknown keys raise."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(model, load_file(str(ckpt.path / ADAPTER_FILE)))
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise RuntimeError(f"checkpoint {ckpt.path} has weights this model lacks: {unexpected[:3]}; "
                           "it was trained with other lora settings: delete it or set output.dir")


def restore(ckpt: Checkpoint, model: Any, optimizer: Any, scheduler: Any) -> None:
    """Adapter, optimizer and scheduler state of ``ckpt`` (resume)."""
    import torch

    load_adapter(ckpt, model)
    trainer = torch.load(ckpt.path / TRAINER_FILE, weights_only=True)
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
