"""LoRA training on prefix → answer pairs: loss on answer tokens only, resumable, deterministic.

``encode_pairs`` renders each pair's prompt with the model's own chat rendering (the decoder's
``render``: the adapted model's system prompt, the benchmark's, the history, the user turn) and
appends the target ids; labels are −100 on the prompt, so only answer tokens carry loss. ``train`` is
a generator over optimizer steps yielding :class:`TrainProgress` (loss, tokens/s); progress bars
belong to the caller. Each step takes ``effective_batch`` sequences (``micro_batch`` at a time,
gradients accumulated) and averages the loss over the step's answer tokens. With
``train.autocast=bf16`` each micro-batch's forward and loss run under bfloat16 autocast while the LoRA
weights, their gradients and AdamW's state stay float32; a checkpoint records the setting, and a resume
with another one is refused.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.adapt import checkpoint
from streamgen.adapt.config import AUTOCASTS, LoraSettings, TrainSettings
from streamgen.adapt.pairs import TrainingPair
from streamgen.config import ConfigError
from streamgen.requests.chat import Message

log = logging.getLogger(__name__)

IGNORE = -100


@dataclass(frozen=True)
class EncodedPair:
    input_ids: tuple[int, ...]
    n_prompt: int  # leading tokens without loss

    @property
    def n_answer(self) -> int:
        return len(self.input_ids) - self.n_prompt


@dataclass(frozen=True)
class EncodedSet:
    pairs: tuple[EncodedPair, ...]
    skipped: int  # prompts that alone fill max_length


@dataclass(frozen=True)
class TrainProgress:
    step: int  # optimizer steps completed
    steps: int
    loss: float  # mean over this step's answer tokens
    learning_rate: float
    tokens: int  # tokens fed in this step
    tokens_per_s: float
    checkpoint: Path | None  # written after this step, if any


def encode_pairs(pairs: Sequence[TrainingPair], render: Callable[[Sequence[Message]], list[int]],
                 tokenize: Callable[[str], list[int]], eos_id: int, max_length: int) -> EncodedSet:
    """Prompt ids + target ids per pair, cut to ``max_length`` (a prompt that fills it is skipped)."""
    out, skipped = [], 0
    for pair in pairs:
        prompt = render(pair.messages)
        target = pair.target_token_ids
        if target is None:
            target = [*tokenize(pair.target_text), eos_id]
        if len(prompt) >= max_length or not target:
            skipped += 1
            continue
        out.append(EncodedPair(tuple((prompt + target)[:max_length]), len(prompt)))
    if skipped:
        log.warning("%d of %d pairs skipped: prompt alone reaches max_length=%d", skipped, len(pairs), max_length)
    return EncodedSet(tuple(out), skipped)


def lora_model(model: Any, lora: LoraSettings, seed: int) -> Any:
    """``model`` wrapped with LoRA adapters on ``lora.target_modules``; only they are trainable.

    The adapters' random initialisation is seeded (the global torch RNG is left untouched), so a run
    and its resumed twin start from the same weights."""
    import torch
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                     target_modules=list(lora.target_modules), task_type="CAUSAL_LM", bias="none")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, cfg)


def step_indices(n: int, seed: int, step: int, count: int) -> list[int]:
    """The pair indices of optimizer step ``step``: epochs of seeded permutations, read in order."""
    out: list[int] = []
    pos = step * count
    while len(out) < count:
        epoch, offset = divmod(pos, n)
        order = list(range(n))
        random.Random(f"{seed}:{epoch}").shuffle(order)
        take = order[offset : offset + count - len(out)]
        out.extend(take)
        pos += len(take)
    return out


def collate(batch: Sequence[EncodedPair], pad_id: int, device: Any) -> dict[str, Any]:
    """Right-padded input ids, attention mask and labels (−100 on prompt and padding)."""
    import torch

    width = max(len(p.input_ids) for p in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, p in enumerate(batch):
        n = len(p.input_ids)
        ids[row, :n] = torch.tensor(p.input_ids)
        labels[row, p.n_prompt : n] = torch.tensor(p.input_ids[p.n_prompt :])
        mask[row, :n] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "labels": labels.to(device)}


def summed_loss(model: Any, batch: dict[str, Any]) -> Any:
    """Cross-entropy summed over the answer tokens of ``batch`` (next-token prediction)."""
    import torch.nn.functional as F

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), batch["labels"][:, 1:].flatten(),
                           ignore_index=IGNORE, reduction="sum")


def bf16_autocast_available(device_type: str) -> bool:
    """Whether torch can autocast to bfloat16 on ``device_type`` (cpu: yes; cuda: where bf16 is supported)."""
    import torch

    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device_type == "cpu" and torch.amp.is_autocast_available("cpu")


def forward_precision(autocast: str, device: Any) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A fresh context per micro-batch for its forward + loss: none (float32) or bfloat16 autocast.

    Raises :class:`ConfigError` up front where ``device`` cannot autocast bfloat16."""
    import torch

    if autocast == "none":
        return contextlib.nullcontext
    if autocast != "bf16":
        raise ConfigError([f"train.autocast={autocast!r} must be one of {AUTOCASTS}"])
    kind = torch.device(device).type
    if not bf16_autocast_available(kind):
        raise ConfigError([f"train.autocast={autocast} on device {device}: torch {torch.__version__} cannot "
                           "autocast bfloat16 there; set train.autocast=none (float32) or train.device=cpu"])
    return lambda: torch.autocast(device_type=kind, dtype=torch.bfloat16)


def refuse_changed_autocast(last: checkpoint.Checkpoint, autocast: str) -> None:
    """Resuming with another forward precision would silently make a run of two halves: refused."""
    was = last.state.get("autocast", "none")  # checkpoints from before train.autocast trained in float32
    if was != autocast:
        raise ConfigError([f"{last.path} was trained with train.autocast={was} but this run sets "
                           f"train.autocast={autocast}: resuming would change the run's precision at step "
                           f"{last.step}. Set train.autocast={was} to resume it, or start a new run "
                           "(another output.dir, or delete its checkpoints/)"], "cannot resume training")


def _optimizer(model: Any, cfg: TrainSettings) -> tuple[Any, Any]:
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    warm = max(1, cfg.warmup_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    return opt, sched


def train(model: Any, data: EncodedSet, cfg: TrainSettings, ckpt_dir: Path, *, pad_id: int, device: Any,
          record: dict[str, Any] | None = None, clock: Callable[[], float] = time.perf_counter) -> Iterator[TrainProgress]:
    """Train the LoRA parameters of ``model`` (a PeftModel) for ``cfg.steps``, resuming from ``ckpt_dir``."""
    import torch

    if not data.pairs:
        raise ValueError("no training pairs: every prompt reached max_length, or the source had none")
    precision = forward_precision(cfg.autocast, device)
    opt, sched = _optimizer(model, cfg)
    last = checkpoint.latest(ckpt_dir)
    start = 0
    if last is not None:
        refuse_changed_autocast(last, cfg.autocast)
        checkpoint.restore(last, model, opt, sched)
        start = last.step
        log.info("resuming from %s (step %d of %d)", last.path, start, cfg.steps)
    model.train()
    for step in range(start, cfg.steps):
        t0 = clock()
        torch.manual_seed(cfg.seed * 1_000_003 + step)  # dropout noise: a function of (seed, step)
        chosen = [data.pairs[i] for i in step_indices(len(data.pairs), cfg.seed, step, cfg.effective_batch)]
        n_answer = sum(p.n_answer for p in chosen)
        total = 0.0
        for k in range(0, len(chosen), cfg.micro_batch):
            with precision():
                loss = summed_loss(model, collate(chosen[k : k + cfg.micro_batch], pad_id, device)) / n_answer
            loss.backward()  # outside autocast, as torch recommends: backward ops take the forward's dtypes
            total += float(loss.detach())
        lr = float(sched.get_last_lr()[0])
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        saved = None
        tokens = sum(len(p.input_ids) for p in chosen)
        if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
            state = {**(record or {}), "seed": cfg.seed, "autocast": cfg.autocast, "loss": total,
                     "learning_rate": lr, "tokens": tokens}
            saved = checkpoint.save(ckpt_dir, step + 1, model, opt, sched, state, cfg.keep_checkpoints).path
        yield TrainProgress(step + 1, cfg.steps, total, lr, tokens, tokens / max(clock() - t0, 1e-9), saved)
    model.eval()
