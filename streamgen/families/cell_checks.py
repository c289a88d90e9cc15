"""Each model family's cell check (what would stop a model decoding a (benchmark, answer budget) cell),
importable without torch: the dry run and the plan check every cell with these before anything loads.

The decoder modules' ``FAMILY`` plug-ins name the same functions (tests/test_cell_checks.py checks that
this table and :data:`streamgen.families.registry.FAMILIES` agree); a family not listed checks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from streamgen.config import ModelConfig
from streamgen.families.bidirectional import settings as bidir_settings
from streamgen.families.refusion import settings as refusion_settings

CELL_CHECKS: Mapping[str, Callable[[ModelConfig, int, str], list[str]]] = MappingProxyType({
    "bidirectional": bidir_settings.check, "refusion": refusion_settings.check})
"""family name → its check ``(cfg, max_new_tokens, benchmark) → problems``."""
