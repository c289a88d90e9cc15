"""What a model family plugs in: how to load its weights and how to wrap them in its decoder.

Each decoder module declares one :class:`FamilyPlugin` named ``FAMILY``; :mod:`streamgen.families.registry` lists
them explicitly (no names looked up at run time). Loading comes from :mod:`streamgen.models.weights`, a leaf
the decoder modules may import, so no decoder module imports the registry (tests/repo/test_import_direction.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from streamgen.config import ModelConfig
from streamgen.decoding.base import Decoder, Family
from streamgen.decoding.forwards import Rule
from streamgen.models.weights import LoadedModel, load_model_and_tokenizer

Loader = Callable[[ModelConfig, str], LoadedModel]
"""``(cfg, device) → LoadedModel``: the weights and tokenizer a model config names."""
CheckCell = Callable[[ModelConfig, int, str], list[str]]
"""``(cfg, max_new_tokens, benchmark) → problems``: what would stop a (benchmark, budget) cell decoding."""
BuildDecoder = Callable[[ModelConfig, Any, Any, str, int], Decoder]
"""``(cfg, model, tokenizer, device, max_new_tokens) → Decoder`` over weights already loaded (cheap)."""


class ModelFamily(Protocol):
    """A model family as the registry, the Ray actors and ``load_decoder`` use it."""

    @property
    def name(self) -> Family: ...

    def load(self, cfg: ModelConfig, device: str) -> LoadedModel:
        """Load the weights once (an actor shares them between every decoder it builds)."""
        ...

    def build_decoder(self, cfg: ModelConfig, model: Any, tokenizer: Any, device: str,
                      max_new_tokens: int) -> Decoder:
        """A decoder over loaded weights, with ``cfg``'s decoding settings."""
        ...

    def cell_problems(self, cfg: ModelConfig, max_new_tokens: int, benchmark: str) -> list[str]:
        """What would stop ``cfg`` decoding a (benchmark, budget) cell, before a grid starts."""
        ...


@dataclass(frozen=True)
class FamilyPlugin:
    """A :class:`ModelFamily` made of two functions; ``load`` defaults to the shared weight loader."""

    name: Family
    build_decoder: BuildDecoder
    load: Loader = load_model_and_tokenizer
    check: CheckCell | None = None  # None: every cell decodes (the settings need no budget)

    def cell_problems(self, cfg: ModelConfig, max_new_tokens: int, benchmark: str) -> list[str]:
        """What would stop ``cfg`` decoding a (benchmark, budget) cell, before a grid starts."""
        return [] if self.check is None else self.check(cfg, max_new_tokens, benchmark)


RuleFor = Callable[[ModelConfig, str, int], Rule]
"""``(cfg, benchmark, budget) → Rule``: a family's forward rule for one cell (streamgen.decoding.forwards)."""


@dataclass(frozen=True)
class FamilyDescriptor:
    """A family as the plan, the estimate and the registry see it, without torch: each family folder's face
    (``streamgen/families/<family>/__init__.py``) declares one, ``DESCRIPTOR``; the decoder module (torch)
    is imported only when ``plugin()`` is called, so the dry run never loads it."""

    name: Family
    forward_rule: RuleFor
    plugin: Callable[[], ModelFamily]  # the decoder module's FAMILY, imported on the first call
    check: CheckCell | None = None  # the same function as the plug-in's ``check``; None: every cell decodes
    answer_positions: Callable[[ModelConfig, str, int], int] | None = None  # None: the answer budget
