"""The bidirectional family (LLaDA / Dream masked diffusion): the decoder (``decoder``), the official
samplers' knobs (``sampler``), settings, geometry and cell check without torch (``settings``), the in-project
model (``model``) and its checkpoint loading (``checkpoint``), the weight loader and decoder builder named as
``FAMILY`` (``plugin``) and the forward rule (``forward_rule``).

This face is the family's descriptor (no torch): the registry (:mod:`streamgen.families.registry`) lists
``DESCRIPTOR``; the decoder module is imported only when its plug-in is asked for."""

from __future__ import annotations

from streamgen.decoding.family import FamilyDescriptor, ModelFamily
from streamgen.families.bidirectional import forward_rule, settings


def _plugin() -> ModelFamily:
    from streamgen.families.bidirectional.plugin import FAMILY

    return FAMILY


DESCRIPTOR = FamilyDescriptor("bidirectional", forward_rule.rule, _plugin, check=settings.check,
                              answer_positions=forward_rule.answer_positions)
