"""A checkpoint against its family's model: :func:`checkpoint_problems`, the pre-flight's one call per model.

The family-independent parts (files whole, the weight map, the tokens, a transformers model built on the
meta device) are :mod:`streamgen.models.checkpoint_facts`; the family's own model (LLaDA / Dream: the in-project
:class:`~streamgen.families.bidirectional.model.BidirLM`) is built here, above the families, so the model
side imports no family (docs/design.md, 'Layers').
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamgen.config import ModelConfig
from streamgen.config.families import PREFLIGHT_BUILT_FAMILIES
from streamgen.models.checkpoint_facts import (
    ExpectedWeights,
    causal_lm_expected,
    file_problems,
    needs_index,
    shapes_of,
    weight_problems,
)
from streamgen.models.checkpoint_files import CheckpointFileError, StoredWeights, read_json, stored_weights
from streamgen.models.checkpoint_tokens import id_field, token_problems, tokenizer_facts


def bidir_expected(style: str, raw: dict[str, Any]) -> ExpectedWeights:
    """The in-project BidirLM of a LLaDA / Dream ``config.json``, on the meta device."""
    import torch

    from streamgen.families.bidirectional.model import BidirLM, map_parameter_name, spec_from_config

    spec = spec_from_config(style, raw)  # type: ignore[arg-type]
    with torch.device("meta"):
        model = BidirLM(spec)
    return ExpectedWeights(shapes_of(model), lambda name: map_parameter_name(spec.arch, name))



def _expected(cfg: ModelConfig, folder: Path, raw: dict[str, Any]) -> ExpectedWeights:
    if cfg.family == "bidirectional" and not cfg.trust_remote_code:
        return bidir_expected(str(dict(cfg.decoding).get("style", "llada")), raw)
    return causal_lm_expected(folder, cfg.trust_remote_code)


def _build_problems(cfg: ModelConfig, folder: Path, raw: dict[str, Any], stored: StoredWeights) -> list[str]:
    """The model built from ``config.json`` on the meta device, and the stored weights against it."""
    from huggingface_hub.errors import StrictDataclassError  # transformers 5's configs validate each field

    try:
        expected = _expected(cfg, folder, raw)
    except (ValueError, KeyError, TypeError, AttributeError, OSError, StrictDataclassError) as exc:  # unknown
        # model type, custom code, a key missing, a field of another type
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [f"model {cfg.name}: {folder / 'config.json'} does not build the project's {cfg.family} model "
                f"({cause[:200]}); use a checkpoint of a supported architecture, or set trust_remote_code: true "
                "in its YAML"]
    return weight_problems(cfg.name, stored, expected)


def checkpoint_problems(cfg: ModelConfig, folder: Path, fetch: str = "download the checkpoint again") -> list[str]:
    """Every problem of the checkpoint in ``folder`` for model ``cfg`` (empty: it fits), one line each;
    ``fetch`` says how to get its files again. A damaged file is one line and ends the check."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        return [f"model {cfg.name}: {folder} has no config.json; {fetch}"]
    try:
        raw = read_json(cfg_path, fetch)
        if (gen := folder / "generation_config.json").is_file():
            id_field(gen, read_json(gen, fetch), "eos_token_id", fetch)
        stored = stored_weights(folder, fetch)
        problems = file_problems(cfg, folder, stored, fetch, needs_index(cfg, raw))
        if cfg.family in PREFLIGHT_BUILT_FAMILIES:
            problems += _build_problems(cfg, folder, raw, stored)
        return problems + token_problems(cfg, cfg_path, raw, tokenizer_facts(folder, fetch), fetch)
    except CheckpointFileError as exc:
        return [f"model {cfg.name}: {exc}"]
