"""The model families, listed explicitly, and ``load_decoder``: a model config → its family's Decoder.

Each family module declares ``FAMILY`` (:class:`streamgen.decoding.family.FamilyPlugin`: its weight
loader and its decoder builder); :data:`FAMILIES` names them all here, so adding a family is one import
and one entry, and a family name a config gives is checked against this list, never imported by name.
Weight loading itself lives in :mod:`streamgen.models.weights`, a leaf the decoder modules import.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from streamgen.config import ConfigError, ModelConfig, raise_if_problems, validate_model
from streamgen.decoding.base import Decoder
from streamgen.decoding.family import ModelFamily
from streamgen.families.autoregressive import decoder as autoregressive
from streamgen.families.bidirectional import decoder as bidirectional
from streamgen.families.diffusion_gemma import decoder as diffusion_gemma
from streamgen.families.refusion import decoder as refusion

FAMILIES: Mapping[str, ModelFamily] = MappingProxyType({family.name: family for family in (
    autoregressive.FAMILY, refusion.FAMILY, bidirectional.FAMILY, diffusion_gemma.FAMILY)})
"""family name → its plug-in (the names are ``streamgen.config.FAMILIES``)."""


def model_family(name: str) -> ModelFamily:
    """The family a model config names; a ConfigError listing the known ones otherwise."""
    if name not in FAMILIES:
        raise ConfigError([f"family={name!r} is not one of {tuple(FAMILIES)}"])
    return FAMILIES[name]


def load_decoder(cfg: ModelConfig, *, device: str = "cpu", max_new_tokens: int = 256) -> Decoder:
    """Load a model's weights and wrap them in its family's decoder (``cfg.family`` picks the family)."""
    raise_if_problems(validate_model(cfg), f"model {cfg.name or '<model>'} is misconfigured")
    family = model_family(cfg.family)
    loaded = family.load(cfg, device)
    return family.build_decoder(cfg, loaded.model, loaded.tokenizer, device, max_new_tokens)

