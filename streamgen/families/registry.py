"""The model families, listed explicitly, and ``load_decoder``: a model config → its family's Decoder.

Each family folder's face (``streamgen/families/<family>/__init__.py``) declares ``DESCRIPTOR``
(:class:`streamgen.decoding.family.FamilyDescriptor`: its forward rule, its cell check, and where its decoder's
``FAMILY`` plug-in is); :data:`DESCRIPTORS` names them all here, so adding a family is one import and one
entry, and a family name a config gives is checked against this list, never imported by name. Importing this
module loads no torch (the dry run and the estimate read :data:`FORWARD_RULES` and :data:`CELL_CHECKS`); a
family's decoder module is imported when :data:`FAMILIES` is asked for its plug-in. Weight loading itself lives
in :mod:`streamgen.models.weights`, a leaf the decoder modules import.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from streamgen.config import ConfigError, ModelConfig, raise_if_problems, validate_model
from streamgen.decoding.base import Decoder
from streamgen.decoding.family import CheckCell, FamilyDescriptor, ModelFamily, RuleFor
from streamgen.families import autoregressive, bidirectional, diffusion_gemma, refusion

DESCRIPTORS: Mapping[str, FamilyDescriptor] = MappingProxyType({family.name: family for family in (
    autoregressive.DESCRIPTOR, bidirectional.DESCRIPTOR, diffusion_gemma.DESCRIPTOR, refusion.DESCRIPTOR)})
"""family name → its descriptor, in the folders' order (the names are ``streamgen.config.FAMILIES``, read from the
same folders; tests/streamgen/models/test_models.py checks the two agree)."""


class _Plugins(Mapping[str, ModelFamily]):
    """family name → its decoder module's plug-in, that module imported on first use."""

    def __getitem__(self, name: str) -> ModelFamily:
        return DESCRIPTORS[name].plugin()

    def __iter__(self) -> Iterator[str]:
        return iter(DESCRIPTORS)

    def __len__(self) -> int:
        return len(DESCRIPTORS)


FAMILIES: Mapping[str, ModelFamily] = _Plugins()
"""family name → its plug-in (weight loader, decoder builder, cell check)."""
FORWARD_RULES: Mapping[str, RuleFor] = MappingProxyType({n: d.forward_rule for n, d in DESCRIPTORS.items()})
"""family name → builder of its forward rule for one (model, benchmark, answer budget); no torch."""
CELL_CHECKS: Mapping[str, CheckCell] = MappingProxyType(
    {n: d.check for n, d in DESCRIPTORS.items() if d.check is not None})
"""family name → its check ``(cfg, max_new_tokens, benchmark) → problems``; no torch. A family not listed
checks nothing."""


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
