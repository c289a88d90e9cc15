"""A multimodal Gemma-3 checkpoint loaded as the text-only ``Gemma3ForCausalLM`` (issue 37, item 5).

Gemma-3-4B/12B/27B-IT are published as ``Gemma3ForConditionalGeneration`` (``config.json``:
``model_type: gemma3`` with a ``text_config`` and a ``vision_config``), so ``AutoModelForCausalLM``
builds the SigLIP vision tower and the projector too. The study feeds text only, and on text the
conditional model's logits are exactly its language model's, so the loader builds ``Gemma3ForCausalLM``
from the ``text_config`` and reads only the language-model tensors, straight to the device
(:mod:`streamgen.models.checkpoint_io`); the vision tower's tensors are never read.

Checkpoint names, both layouts seen in practice:

- ``language_model.model.<x>`` (+ ``vision_tower.vision_model.*``, ``multi_modal_projector.*``): the hub
  files of google/gemma-3-*-it, written by transformers 4; also what transformers 5 writes back on save;
- ``model.language_model.<x>`` (+ ``model.vision_tower.*``, ``model.multi_modal_projector.*``): the module
  names of transformers 5's ``Gemma3ForConditionalGeneration``, found in checkpoints saved by other tools.

Both map to ``model.<x>`` of ``Gemma3ForCausalLM``. The output layer is tied to the embeddings (the hub
files hold no ``lm_head``); an explicit ``language_model.lm_head.weight`` / ``lm_head.weight`` is read only
when the text config unties them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from streamgen.models.checkpoint_io import (
    CheckpointReadError,
    checkpoint_tensors,
    parameters_on_meta,
    read_into,
    still_on_meta,
)

log = logging.getLogger(__name__)

LANGUAGE_PREFIXES = ("language_model.model.", "model.language_model.")
LM_HEAD_NAMES = ("language_model.lm_head.weight", "lm_head.weight")
# What a checkpoint folder needs to build the text model; the tokenizer files are read by AutoTokenizer.
SNAPSHOT_PATTERNS = ["*.json", "*.safetensors"]


def is_multimodal_gemma3(config: Any) -> bool:
    """True for a ``Gemma3ForConditionalGeneration`` config (text + vision), False for Gemma-3 text ones."""
    return getattr(config, "model_type", None) == "gemma3" and getattr(config, "text_config", None) is not None


def text_parameter_name(name: str, *, tied: bool) -> str | None:
    """The ``Gemma3ForCausalLM`` parameter a checkpoint tensor loads into; ``None`` for the vision
    tower's and projector's tensors (and for ``lm_head`` when the output layer is tied)."""
    for prefix in LANGUAGE_PREFIXES:
        if name.startswith(prefix):
            return "model." + name[len(prefix):]
    if name in LM_HEAD_NAMES:
        return None if tied else "lm_head.weight"
    return None


def text_config(config: Any) -> Any:
    """The multimodal config's ``text_config``, with the special-token ids it leaves to the outer config."""
    text = config.text_config
    for key in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if getattr(text, key, None) is None and getattr(config, key, None) is not None:
            setattr(text, key, getattr(config, key))
    return text


def local_snapshot(path: str | Path, revision: str | None) -> Path:
    """``path`` itself when it is a folder; else the hub id's snapshot in the local cache (its JSON files
    and safetensors only: the hub is contacted only because the model YAML names a hub id, docs/design.md, 'Principles')."""
    if Path(path).is_dir():
        return Path(path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(path), revision=revision, allow_patterns=SNAPSHOT_PATTERNS))


def load_gemma3_text(folder: str | Path, config: Any, *, device: str, dtype: torch.dtype) -> Any:
    """``Gemma3ForCausalLM`` on ``device`` in ``dtype`` from the multimodal checkpoint in ``folder``.

    Raises :class:`CheckpointReadError` naming every language-model parameter the checkpoint lacks or
    holds in another shape.
    """
    from transformers import Gemma3ForCausalLM, GenerationConfig

    text = text_config(config)
    with parameters_on_meta(device):
        model = Gemma3ForCausalLM(text)
    tied = "lm_head.weight" in model.all_tied_weights_keys  # {tied parameter: the one it shares}
    tensors = checkpoint_tensors(folder)
    names = {k: t for k in tensors if (t := text_parameter_name(k, tied=tied)) is not None}
    _check_fits(model, {names[k]: tensors[k].shape for k in names}, folder)
    read_into(model, tensors, names, device=device, dtype=dtype)
    model.tie_weights()
    left = still_on_meta(model)
    if left:
        raise CheckpointReadError(f"{folder}: the text model's {left[:5]} got no weights; check that "
                                  "config.json belongs to these safetensors")
    if (Path(folder) / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder)
    return model.eval()


def _check_fits(model: Any, shapes: dict[str, tuple[int, ...]], folder: str | Path) -> None:
    own = {name: tuple(p.shape) for name, p in model.named_parameters() if name not in model.all_tied_weights_keys}
    missing = sorted(set(own) - set(shapes))
    wrong = [f"{k}: checkpoint {s} vs model {own[k]}" for k, s in shapes.items() if k in own and s != own[k]]
    extra = sorted(set(shapes) - set(own))
    if missing or wrong or extra:
        raise CheckpointReadError(
            f"{folder}: the Gemma-3 language-model tensors do not fit the text model built from config.json: "
            f"missing {missing[:5]}, unexpected {extra[:5]}, wrong shapes {wrong[:5]}; check that config.json "
            f"belongs to these safetensors (names read: {LANGUAGE_PREFIXES[0]}* or {LANGUAGE_PREFIXES[1]}*)")
