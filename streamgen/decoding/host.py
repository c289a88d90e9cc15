"""One device→host transfer per forward: the values a decoding loop needs, as Python numbers.

Every ``.item()``, ``.tolist()``, ``int(t)``, ``float(t)`` or ``bool(t)`` of a CUDA tensor waits for the
device (a host sync). Inside a timed span, one per draft token skews the wall clock by the draft's
length; so the verifiers, canvases and samplers stack what they need into one tensor, move it once
(:func:`to_host`), and loop over Python values (docs/accounting.md, "Clean timing").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from streamgen.decoding.verification import Verification


def to_host(*tensors: torch.Tensor) -> list[list[float]]:
    """Each of ``tensors`` (any shapes and numeric dtypes) as a flat Python list, all in ONE transfer.

    They travel concatenated as float64, which holds every float32/bf16/fp16 value and every integer
    below 2**53 exactly, so token ids (``int(v)``) and probabilities come back bit for bit as a
    separate ``.tolist()`` of each would give them."""
    if not tensors:
        return []
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors]).tolist()
    out, start = [], 0
    for t in tensors:
        out.append(flat[start:start + t.numel()])
        start += t.numel()
    return out


def verification_from_probs(probs: torch.Tensor, draft: Sequence[int]) -> Verification:
    """Per draft position j: the argmax of ``probs`` row j and the probability it gives ``draft[j]``,
    moved to the host in one transfer. ``probs``: (len(draft), vocab), already a softmax."""
    idx = torch.tensor(list(draft), dtype=torch.long, device=probs.device)
    top, picked = to_host(probs.argmax(-1), probs.gather(-1, idx[:, None])[:, 0])
    return Verification(tuple(int(t) for t in top), tuple(picked))
