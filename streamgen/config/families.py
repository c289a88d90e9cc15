"""The model families' names, and what the configuration must know of each, read from the family folders.

Each folder ``streamgen/families/<family>/`` holds a ``family.yaml``: the folder's name is the family's name
and the file is data, so the configuration (torch-free, below the families: docs/design.md, 'Layers') needs
no family's code. It says ``verifier_modes`` (whether the grid sweeps ``verifier_modes`` for the family),
``tiny_archs`` (its ``source: tiny`` architectures), ``deviations`` (the project's differences from the
official sampler, option → default, off), ``preflight_builds`` (the pre-flight builds its model on the meta
device to check a checkpoint's names) and ``from_pretrained`` (transformers loads it, finding shards through the
index only). The registry (:mod:`streamgen.families.registry`) lists the same
names with their code; tests/streamgen/models/test_models.py checks the two agree. The files are read once, on import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FAMILIES_DIR = Path(__file__).resolve().parents[1] / "families"
DESCRIPTOR_FILE = "family.yaml"
KEYS = ("verifier_modes", "tiny_archs", "deviations", "preflight_builds", "from_pretrained")

Family = str
"""A model family's name: a folder of ``streamgen/families/`` holding a ``family.yaml`` (:data:`FAMILIES`)."""


@dataclass(frozen=True)
class FamilyFacts:
    """One ``family.yaml``."""

    name: str
    verifier_modes: bool = False
    tiny_archs: tuple[str, ...] = ()
    deviations: dict[str, Any] = field(default_factory=dict)
    preflight_builds: bool = False
    from_pretrained: bool = False


def read_facts(folder: Path = FAMILIES_DIR) -> tuple[FamilyFacts, ...]:
    """Every family folder's facts, in the folders' alphabetical order; a malformed file raises naming it."""
    facts = []
    for path in sorted(folder.glob(f"*/{DESCRIPTOR_FILE}")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        unknown = sorted(set(raw) - set(KEYS))
        if unknown or not isinstance(raw.get("deviations", {}), dict):
            raise ValueError(f"{path}: keys are {', '.join(KEYS)} (deviations: a mapping); "
                             f"fix {unknown or 'deviations'}")
        facts.append(FamilyFacts(path.parent.name, bool(raw.get("verifier_modes", False)),
                                 tuple(raw.get("tiny_archs") or ()), dict(raw.get("deviations") or {}),
                                 bool(raw.get("preflight_builds", False)), bool(raw.get("from_pretrained", False))))
    return tuple(facts)


_FACTS = read_facts()
FAMILIES: tuple[Family, ...] = tuple(f.name for f in _FACTS)
VERIFIER_MODE_FAMILIES: tuple[Family, ...] = tuple(f.name for f in _FACTS if f.verifier_modes)
"""The families the grid sweeps ``verifier_modes`` for."""
DIFFUSION_DEVIATIONS: dict[str, dict[str, Any]] = {f.name: f.deviations for f in _FACTS if f.deviations}
"""Per diffusion family, the project's differences from the official samplers: option → default (off).
The decoders' settings take their defaults from here; every cell fingerprint of the family records them,
so a run that turns one on never shares a fingerprint with one that does not (docs/diffusion.md)."""
TINY_ARCHS: tuple[str, ...] = tuple(arch for f in _FACTS for arch in f.tiny_archs)
"""Every family's ``source: tiny`` architectures."""
PREFLIGHT_BUILT_FAMILIES: tuple[Family, ...] = tuple(f.name for f in _FACTS if f.preflight_builds)
"""The families whose model the pre-flight builds on the meta device (streamgen/families/checkpoint_match.py)."""
FROM_PRETRAINED_FAMILIES: tuple[Family, ...] = tuple(f.name for f in _FACTS if f.from_pretrained)
"""The families transformers' ``from_pretrained`` loads (it finds shards through the index only)."""
