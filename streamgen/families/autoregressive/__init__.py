"""The autoregressive family: KV-cached greedy decode and one-forward verify (``decoder``), its forward rule
(``forward_rule``); the diffusion families carry one of its decoders for their text side.

This face is the family's descriptor (no torch): the registry (:mod:`streamgen.families.registry`) lists
``DESCRIPTOR``; the decoder module is imported only when its plug-in is asked for."""

from __future__ import annotations

from streamgen.decoding.family import FamilyDescriptor, ModelFamily
from streamgen.families.autoregressive import forward_rule


def _plugin() -> ModelFamily:
    from streamgen.families.autoregressive.decoder import FAMILY

    return FAMILY


DESCRIPTOR = FamilyDescriptor("autoregressive", forward_rule.rule, _plugin)
