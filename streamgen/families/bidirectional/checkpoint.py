"""A LLaDA / Dream checkpoint folder loaded into the in-project :class:`~streamgen.families.bidirectional.model.BidirLM`
(no hub code): the folder a config names, the tensors mapped by name, the tokenizer."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from streamgen.families.bidirectional.model import (
    BidirArch,
    BidirLM,
    CheckpointError,
    check_checkpoint_fits,
    map_parameter_name,
    spec_from_config,
)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Loading a real checkpoint folder (no hub code)
# --------------------------------------------------------------------------------------------


def load_bidir_checkpoint(arch: BidirArch, folder: str | Path, *, dtype: torch.dtype = torch.bfloat16,
                          device: str = "cpu") -> BidirLM:
    """Build :class:`BidirLM` from ``folder/config.json`` and load ``folder/*.safetensors`` by name mapping.

    Straight to ``device``: the model is built with its parameters on meta and its RoPE buffer computed
    on ``device`` in float32; each checkpoint tensor is read there and cast to ``dtype`` one at a time
    (:mod:`streamgen.models.checkpoint_io`), so no full host copy is ever made.
    """
    from streamgen.models.checkpoint_io import (
        CheckpointReadError,
        checkpoint_tensors,
        parameters_on_meta,
        read_into,
        still_on_meta,
    )

    folder = Path(folder)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{cfg_path} is missing: point path: at a downloaded {arch} checkpoint folder")
    spec = spec_from_config(arch, json.loads(cfg_path.read_text()))
    log.info("building in-project %s model %s on %s", arch, asdict(spec), device)
    with parameters_on_meta(device):
        model = BidirLM(spec)
    try:
        tensors = checkpoint_tensors(folder)
    except CheckpointReadError as exc:
        raise CheckpointError(str(exc)) from exc
    try:
        names = {name: map_parameter_name(arch, name) for name in tensors}
        check_checkpoint_fits(model, {names[k]: info.shape for k, info in tensors.items()})
        read_into(model, tensors, names, device=device, dtype=dtype)
    except (CheckpointError, CheckpointReadError) as exc:  # named with the folder: an actor's log says which
        raise CheckpointError(f"{folder}: {exc}") from exc
    assert not still_on_meta(model), still_on_meta(model)  # check_checkpoint_fits named every parameter
    return model.eval()


def resolve_checkpoint_folder(path: str, revision: str | None, source: str) -> Path:
    """A local folder for ``path``: itself (``~`` and ``$VAR`` expanded) for ``source=local``; the hub
    snapshot for ``source=hub``.

    The hub is only contacted because the user configured a hub id (docs/design.md, 'Principles').
    """
    if source == "local":
        from streamgen.models.hub_cache import local_folder

        return local_folder(path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(path, revision=revision))


def load_checkpoint_tokenizer(folder: str | Path) -> Any:
    """The checkpoint's tokenizer without hub code.

    ``AutoTokenizer`` refuses folders whose config points at custom code (Dream's ``DreamTokenizer``);
    those are byte-level BPE tokenizers underneath, so build a fast tokenizer from ``tokenizer.json``
    (or ``vocab.json`` + ``merges.txt`` as Qwen2's) with the special tokens and chat template the
    folder declares.
    """
    from transformers import AutoTokenizer

    folder = Path(folder)
    try:
        return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        log.info("AutoTokenizer refused %s (%s); building the tokenizer from its files", folder, str(exc)[:80])
    meta_path = folder / "tokenizer_config.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    named = {k: meta[k] for k in ("eos_token", "pad_token", "bos_token", "mask_token") if isinstance(meta.get(k), str)}
    if (folder / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), **named)
    elif (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        from transformers import Qwen2Tokenizer

        merges = [tuple(line.split()) for line in (folder / "merges.txt").read_text().splitlines()
                  if line.strip() and not line.startswith("#version")]
        tok = Qwen2Tokenizer(vocab=json.loads((folder / "vocab.json").read_text()), merges=merges,  # type: ignore[arg-type]
                             **named)
        added = meta.get("added_tokens_decoder", {})
        tok.add_tokens([added[k]["content"] for k in sorted(added, key=int)], special_tokens=True)
    else:
        raise CheckpointError(f"{folder} has neither tokenizer.json nor vocab.json + merges.txt")
    template = folder / "chat_template.jinja"
    tok.chat_template = template.read_text() if template.is_file() else meta.get("chat_template")
    return tok
