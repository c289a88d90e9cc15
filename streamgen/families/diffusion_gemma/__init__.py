"""The DiffusionGemma family (transformers' block diffusion): the metered decoder (``decoder``), one canvas's
denoising loop and verify rows (``canvas``), the weight loader and decoder builder named as ``FAMILY``
(``plugin``) and the forward rule (``forward_rule``).

This face is the family's descriptor (no torch): the registry (:mod:`streamgen.families.registry`) lists
``DESCRIPTOR``; the decoder module is imported only when its plug-in is asked for."""

from __future__ import annotations

from streamgen.decoding.family import FamilyDescriptor, ModelFamily
from streamgen.families.diffusion_gemma import forward_rule


def _plugin() -> ModelFamily:
    from streamgen.families.diffusion_gemma.plugin import FAMILY

    return FAMILY


DESCRIPTOR = FamilyDescriptor("diffusion_gemma", forward_rule.rule, _plugin)
