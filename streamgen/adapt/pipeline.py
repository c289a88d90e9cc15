"""The adaptation stages over one recipe: pairs → train → merge (evaluation is an ordinary grid).

Every stage reads and writes files under ``cfg.out_dir``, so each can run alone, in another process
(a Slurm job), or again after an interruption:

``teacher-<hash>/part-*.parquet``  teacher answers (resumable cache)
``pairs.parquet``                  the training pairs
``checkpoints/step-NNNNNN/``       LoRA checkpoints (resume from the newest)
``train.json``                     the training record: settings, seeds, losses, versions
``model/``                         the merged model; its config goes to ``configs/models/<name>.yaml``

Callers pass progress callbacks; this module draws no bars and starts no jobs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from streamgen.adapt import checkpoint, curve
from streamgen.adapt.config import AdaptConfig
from streamgen.adapt.merge import adapted_config, merged_model, save_model_folder, write_model_yaml
from streamgen.adapt.pairs import TrainingPair, build_pairs
from streamgen.adapt.sources import load_requests
from streamgen.adapt.teacher import cache_key, teacher_answers
from streamgen.adapt.train import EncodedSet, TrainProgress, encode_pairs, lora_model, train
from streamgen.config import ModelConfig, model_config
from streamgen.requests.chat import Message
from streamgen.requests.segment import SentenceSegmenter
from streamgen.results.cells import effective_system_prompt
from streamgen.results.records import from_table, to_table, write_parquet_atomic
from streamgen.results.version import code_version

log = logging.getLogger(__name__)


def pairs_path(cfg: AdaptConfig) -> Path:
    return cfg.out_dir / "pairs.parquet"


def needs_teacher(cfg: AdaptConfig) -> bool:
    return cfg.pairs.target == "teacher" or cfg.pairs.variant == "draft_refinement"


def make_pairs(cfg: AdaptConfig, on_answer: Callable[[int], None] | None = None) -> Path:
    """Requests → (teacher answers) → pairs, written to ``pairs.parquet``; returns its path."""
    from streamgen.families.registry import load_decoder
    requests = load_requests(cfg.source, cfg.data_dir)  # leakage refused here, before any model loads
    base = model_config(cfg.model)
    decoder = load_decoder(base, device=resolve_device(cfg.train.device), max_new_tokens=cfg.pairs.max_new_tokens)
    segmenter = SentenceSegmenter()
    teacher = {}
    if needs_teacher(cfg):
        with_drafts = cfg.pairs.variant == "draft_refinement"
        key = cache_key(base, cfg.pairs.max_new_tokens, with_drafts)
        teacher = teacher_answers(decoder, requests, segmenter, cfg.out_dir / f"teacher-{key}",
                                  with_drafts=with_drafts, on_answer=on_answer)
    pairs = build_pairs(requests, segmenter, cfg.pairs, teacher, decoder.decode_text)  # type: ignore[attr-defined]
    log.info("%d requests → %d pairs", len(requests), len(pairs))
    return write_parquet_atomic(to_table(pairs, TrainingPair), pairs_path(cfg))


def read_pairs(cfg: AdaptConfig) -> list[TrainingPair]:
    path = pairs_path(cfg)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run the pairs stage first (stage=pairs)")
    return list(from_table(pq.read_table(path), TrainingPair))


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def prompt_renderer(base: ModelConfig, cfg: AdaptConfig, model: Any, tokenizer: Any, device: str) -> Any:
    """The adapted model's own request rendering (its system prompt; the family decoder's ``render``)."""
    from streamgen.families.autoregressive.decoder import build_decoder

    adapted = dataclasses.replace(base, system_prompt=cfg.output.system_prompt)
    return build_decoder(adapted, model, tokenizer, device, cfg.pairs.max_new_tokens)


def composed_messages(messages: Sequence[Message], model_prompt: str | None) -> list[Message]:
    """The messages as the grid renders them for a model with ``model_prompt``: the model's system
    prompt, then the benchmark's, in one system turn (``streamgen.results.cells.effective_system_prompt``).
    Without a system turn the decoder's ``render`` prepends the model's prompt itself."""
    if not messages or messages[0]["role"] != "system":
        return list(messages)
    first = {"role": "system", "content": effective_system_prompt(model_prompt, messages[0]["content"])}
    return [first, *messages[1:]]  # type: ignore[list-item]


def encode(cfg: AdaptConfig, pairs: list[TrainingPair], model: Any, tokenizer: Any, device: str) -> EncodedSet:
    decoder = prompt_renderer(model_config(cfg.model), cfg, model, tokenizer, device)
    eos = sorted(decoder.eos_token_ids)[0] if tokenizer.eos_token_id is None else tokenizer.eos_token_id
    prompt = cfg.output.system_prompt
    return encode_pairs(pairs, lambda msgs: decoder.render(composed_messages(msgs, prompt)),
                        lambda t: list(tokenizer(t, add_special_tokens=False)["input_ids"]),
                        eos, cfg.train.max_length)


def training_record(cfg: AdaptConfig, data: EncodedSet, device: str) -> dict[str, Any]:
    import peft
    import torch
    import transformers

    return {"recipe": cfg.name, "model": cfg.model, "variant": cfg.variant, "seed": cfg.train.seed,
            "pairs": len(data.pairs), "pairs_skipped": data.skipped, "device": device,
            "autocast": cfg.train.autocast,
            "code_version": code_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "peft": peft.__version__}


def train_adapter(cfg: AdaptConfig, on_step: Callable[[TrainProgress], None] | None = None,
                  on_heldout: Callable[[int, curve.Agreement], None] | None = None) -> Path:
    """Train (or resume) the LoRA adapter; returns the checkpoint folder of the last step. The curve
    (``curve.jsonl``: every step's loss, the held-out draft agreement at step 0 and every checkpoint)
    is written as it goes (``streamgen.adapt.curve``)."""
    import torch

    from streamgen.models.weights import load_model_and_tokenizer

    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    device = resolve_device(cfg.train.device)
    loaded = load_model_and_tokenizer(model_config(cfg.model), device)
    train_pairs, held_pairs = curve.split_heldout(read_pairs(cfg), cfg.curve.heldout)
    data = encode(cfg, train_pairs, loaded.model, loaded.tokenizer, device)
    held = encode(cfg, held_pairs, loaded.model, loaded.tokenizer, device).pairs if held_pairs else ()
    model = lora_model(loaded.model, cfg.lora, cfg.train.seed)
    record = {**training_record(cfg, data, device), "heldout_requests": cfg.curve.heldout,
              "heldout_pairs": len(held)}
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
    curve_path = cfg.out_dir / curve.CURVE_FILE
    resumed = checkpoint.latest(cfg.out_dir / "checkpoints")
    curve.resume(curve_path, resumed)

    def evaluate_heldout(step: int) -> None:
        if held and not curve.has_evaluation(curve_path, step):
            found = curve.agreement(model, held, pad_id=pad, device=device, batch=cfg.train.micro_batch)
            curve.write_rows(curve_path, [found.as_row(step)])
            log.info("step %d: held-out draft agreement %.3f (first token %.2f, whole %.2f) over %d pairs",
                     step, found.agreement, found.first_token, found.whole, found.pairs)
            if on_heldout:
                on_heldout(step, found)

    if resumed is None:
        evaluate_heldout(0)  # the plain model
    elif not curve.has_evaluation(curve_path, resumed.step):  # stopped between its checkpoint and its evaluation
        checkpoint.load_adapter(resumed, model)  # (train() restores it again, with the optimizer)
        evaluate_heldout(resumed.step)
    losses: list[float] = []
    for progress in train(model, data, cfg.train, cfg.out_dir / "checkpoints", pad_id=pad, device=device,
                          record=record):
        losses.append(progress.loss)
        curve.write_rows(curve_path, [{"step": progress.step, "loss": progress.loss,
                                       "learning_rate": progress.learning_rate, "tokens": progress.tokens}])
        if progress.checkpoint:
            evaluate_heldout(progress.step)
        if on_step:
            on_step(progress)
    (cfg.out_dir / "train.json").write_text(json.dumps({**record, "losses_this_run": losses,
                                                        "config": dataclasses.asdict(cfg)}, indent=1))
    final = checkpoint.latest(cfg.out_dir / "checkpoints")
    assert final is not None and final.step == cfg.train.steps, "training ended without its last checkpoint"
    return final.path


def merge_adapter(cfg: AdaptConfig) -> Path:
    """Fold the last checkpoint into the base weights; write ``model/`` and the model YAML."""
    from streamgen.models.weights import load_model_and_tokenizer

    final = checkpoint.latest(cfg.out_dir / "checkpoints")
    if final is None or final.step != cfg.train.steps:
        raise FileNotFoundError(f"no checkpoint at step {cfg.train.steps} under {cfg.out_dir / 'checkpoints'}: "
                                "run the train stage first (stage=train)")
    base = model_config(cfg.model)
    loaded = load_model_and_tokenizer(base, "cpu")
    model = lora_model(loaded.model, cfg.lora, cfg.train.seed)
    checkpoint.load_adapter(final, model)
    folder = save_model_folder(merged_model(model), loaded.tokenizer, cfg.out_dir / "model")
    adapted = adapted_config(base, cfg.adapted_name, folder.resolve(), cfg.variant, cfg.output.system_prompt)
    return write_model_yaml(adapted, cfg.model_configs_dir, f"recipe {cfg.name}, {final.step} steps")



TRAINING_STAGES = ("pairs", "train", "merge")
"""The stages that need the model (they run in the training job on Slurm); ``eval`` is a grid."""


def run_stages(cfg: AdaptConfig, stages: tuple[str, ...], *, on_answer: Callable[[int], None] | None = None,
               on_step: Callable[[TrainProgress], None] | None = None,
               on_heldout: Callable[[int, curve.Agreement], None] | None = None) -> dict[str, str]:
    """Run the named training stages in order; returns each stage's output path."""
    unknown = [s for s in stages if s not in TRAINING_STAGES]
    if unknown:
        raise ValueError(f"unknown stages {unknown}: use {TRAINING_STAGES}")
    out: dict[str, str] = {}
    if "pairs" in stages:
        out["pairs"] = str(make_pairs(cfg, on_answer))
    if "train" in stages:
        out["train"] = str(train_adapter(cfg, on_step, on_heldout))
    if "merge" in stages:
        out["merge"] = str(merge_adapter(cfg))
    return out


def absolute(cfg: AdaptConfig) -> AdaptConfig:
    """Output, data and configs paths made absolute (a job may start in another directory)."""
    out = dataclasses.replace(cfg.output, dir=str(cfg.out_dir.resolve()),
                              configs_dir=str(cfg.model_configs_dir.resolve()))
    source = dataclasses.replace(cfg.source, data_dir=str(cfg.data_dir.resolve()))
    return dataclasses.replace(cfg, output=out, source=source)
