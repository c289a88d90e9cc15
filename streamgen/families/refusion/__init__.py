"""The ReFusion family: slot diffusion on a causal model with an autoregressive verifier (``decoder``), its
settings, slot geometry and cell check without torch (``settings``), its round engine (``slots``) and its
forward rule (``forward_rule``).

This face is the family's descriptor (no torch): the registry (:mod:`streamgen.families.registry`) lists
``DESCRIPTOR``; the decoder module is imported only when its plug-in is asked for."""

from __future__ import annotations

from streamgen.decoding.family import FamilyDescriptor, ModelFamily
from streamgen.families.refusion import forward_rule, settings


def _plugin() -> ModelFamily:
    from streamgen.families.refusion.decoder import FAMILY

    return FAMILY


DESCRIPTOR = FamilyDescriptor("refusion", forward_rule.rule, _plugin, check=settings.check,
                              answer_positions=forward_rule.answer_positions)
