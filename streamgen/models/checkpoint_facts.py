"""A checkpoint's facts read without its tensors: whether its files are whole and whether it fits the model.

For one hub snapshot or local folder (:mod:`streamgen.models.hub_cache` finds it), without the network and
without reading tensor data, :func:`streamgen.families.checkpoint_match.checkpoint_problems` says (with the parts here):

- whether each file the loaders will read is whole (:mod:`streamgen.models.checkpoint_files`): config.json,
  generation_config.json, the safetensors index and headers (against each shard's length), the tokenizer
  files; a damaged one is one line naming the file and the fix, and ends that model's check;
- whether the weight map is what the loader will use: each tensor in the shard the index names, none in
  two shards, an index where transformers needs one;
- whether ``config.json`` builds the project's model on the meta device and the weights map one to one onto
  its parameters with equal shapes and a float dtype (bidirectional:
  :func:`~streamgen.families.bidirectional.model.map_parameter_name`; transformers models: the renaming
  transformers applies on load);
- whether the tokenizer's EOS and mask ids agree with the config and the model YAML, and whether it has the
  chat template the YAML requires (:mod:`streamgen.models.checkpoint_tokens`).

Each problem is one line naming the model, the cause and the fix (``jobs/grid/checkpoint_preflight.py`` collects them
for a grid). A multimodal Gemma-3 checkpoint is checked as its text model: ``vision_tower.*`` and
``multi_modal_projector.*`` are expected extras (the study loads the text model only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.config import ModelConfig
from streamgen.config.families import FROM_PRETRAINED_FAMILIES
from streamgen.models.checkpoint_files import (
    FLOAT_DTYPES,
    INDEX_FILE,
    SINGLE_FILE,
    StoredWeights,
    few,
)

MULTIMODAL_EXTRAS = ("vision_tower.", "multi_modal_projector.")
# the text weights of a Gemma3ForConditionalGeneration checkpoint (as published; as transformers 5 names them)
_TEXT_PREFIXES = (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."),
                  ("model.language_model.", "model."))


# --------------------------------------------------------------------------------------------
# What the model expects: parameter names and shapes built on the meta device
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedWeights:
    """The model's parameter shapes, how a checkpoint name maps onto them, and the names allowed to lack
    a tensor (a tied ``lm_head.weight``) or to be left over (a multimodal checkpoint's vision tower)."""

    shapes: Mapping[str, tuple[int, ...]]
    rename: Any  # checkpoint name → model name (raises ValueError for an unmappable name)
    optional: frozenset[str] = frozenset()
    extra_prefixes: tuple[str, ...] = ()


def shapes_of(model: Any) -> dict[str, tuple[int, ...]]:
    return {n: tuple(p.shape) for n, p in model.named_parameters(remove_duplicate=False)}


def causal_lm_expected(folder: Path, trust_remote_code: bool) -> ExpectedWeights:
    """The transformers causal LM of ``folder/config.json`` on the meta device (a multimodal config: its
    text model), with the key renaming transformers applies on load."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    multimodal = config.get_text_config() is not config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config.get_text_config(), trust_remote_code=trust_remote_code)
    shapes = shapes_of(model)
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    return ExpectedWeights(shapes, _transformers_rename(model, shapes, multimodal),
                           frozenset({"lm_head.weight"}) if tied else frozenset(),
                           MULTIMODAL_EXTRAS if multimodal else ())


def _transformers_rename(model: Any, shapes: Mapping[str, Any], multimodal: bool) -> Any:
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, rename_source_key

    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if not isinstance(t, WeightConverter)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]

    def rename(name: str) -> str:
        if multimodal:  # the conditional-generation checkpoint's text weights → the text model's names
            name = next((new + name[len(old):] for old, new in _TEXT_PREFIXES if name.startswith(old)), name)
        return rename_source_key(name, renamings, converters, model.base_model_prefix, shapes)[0]  # type: ignore[arg-type]

    return rename


# --------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------


def _mapped(stored: StoredWeights, expected: ExpectedWeights) -> tuple[dict[str, str], list[str]]:
    """Checkpoint name → parameter name for every stored weight, and the names that map nowhere."""
    mapped: dict[str, str] = {}
    unmappable: list[str] = []
    for name in stored.shapes:
        if name.startswith(expected.extra_prefixes):
            continue
        try:
            mapped[name] = expected.rename(name)
        except ValueError:
            unmappable.append(name)
    return mapped, unmappable


def weight_problems(model: str, stored: StoredWeights, expected: ExpectedWeights) -> list[str]:
    """Names missing, left over, filled twice or of another shape; weights in a dtype the loaders would
    not cast losslessly (integer or quantised where the model's parameters are float)."""
    mapped, unmappable = _mapped(stored, expected)
    missing = set(expected.shapes) - set(mapped.values()) - expected.optional
    left = [n for n, t in mapped.items() if t not in expected.shapes] + unmappable
    wrong = [f"{n} {stored.shapes[n]} vs {expected.shapes[t]}" for n, t in mapped.items()
             if t in expected.shapes and stored.shapes[n] is not None and stored.shapes[n] != expected.shapes[t]]
    twice = [t for t, n in Counter(mapped.values()).items() if n > 1]
    quantised = [f"{n} {stored.dtypes[n]}" for n in mapped if stored.dtypes.get(n, "BF16") not in FLOAT_DTYPES]
    fix = "check that config.json and the weights belong to the same checkpoint (or set trust_remote_code: true)"
    p: list[str] = []
    if twice:
        p.append(f"model {model}: {len(twice)} parameters get more than one checkpoint weight: {few(twice)}; {fix}")
    if missing:
        p.append(f"model {model}: {len(missing)} parameters have no weight in the checkpoint: {few(missing)}; {fix}")
    if left:
        p.append(f"model {model}: {len(left)} checkpoint weights map onto no parameter: {few(left)}; {fix}")
    if wrong:
        p.append(f"model {model}: {len(wrong)} weights have another shape (checkpoint vs model): {few(wrong)}; {fix}")
    if quantised:
        p.append(f"model {model}: {len(quantised)} weights are integer or quantised where the model's parameters "
                 f"are float: {few(quantised)}; the loaders read float (F32 / F16 / BF16) safetensors only and "
                 "support no quantisation: use the checkpoint's bf16 release")
    return p


def needs_index(cfg: ModelConfig, raw: dict[str, Any]) -> bool:
    """Whether ``cfg``'s loader is transformers' ``from_pretrained`` (which finds shards through the index
    only); a multimodal Gemma-3 is read by :mod:`streamgen.models.gemma3_text`, which finds them itself."""
    multimodal_gemma3 = raw.get("model_type") == "gemma3" and isinstance(raw.get("text_config"), dict)
    return (cfg.family in FROM_PRETRAINED_FAMILIES or cfg.trust_remote_code) and not multimodal_gemma3


def file_problems(cfg: ModelConfig, folder: Path, stored: StoredWeights, fetch: str, index_needed: bool) -> list[str]:
    """The files themselves: shards the index names that are absent, where the index and the shards
    disagree, and a sharded checkpoint without the index a transformers loader needs."""
    p = [f"model {cfg.name}: {finding}; {fetch}" for finding in stored.findings]
    if stored.missing_files:
        p.insert(0, f"model {cfg.name}: {folder / INDEX_FILE} names shard files that are not there: "
                    f"{few(stored.missing_files)} (an interrupted download); {fetch}")
    if not stored.files:
        p.append(f"model {cfg.name}: no *.safetensors weights in {folder}; {fetch}")
    if index_needed and not stored.indexed and stored.files and list(stored.files) != [SINGLE_FILE]:
        p.append(f"model {cfg.name}: {folder} holds {few(stored.files)} but no {INDEX_FILE}: transformers reads "
                 f"only {SINGLE_FILE} or the shards its index names; {fetch}")
    return p
