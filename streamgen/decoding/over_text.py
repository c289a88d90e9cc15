"""The Decoder-protocol members a diffusion family delegates to the autoregressive decoder it carries.

ReFusion, bidirectional and DiffusionGemma decoders each hold ``text``, an
:class:`~streamgen.decoding.autoregressive.AutoregressiveDecoder` over the same weights that renders the
request, checks the context, detokenises and owns the meter. :class:`OverText` gives them those members
once, plus the draft cut every verify pass scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Self

from streamgen.decoding.acceptance import cut_draft
from streamgen.requests.chat import Message

if TYPE_CHECKING:
    from streamgen.decoding.autoregressive import AutoregressiveDecoder


class OverText:
    """Mixin: ``max_context``, ``count_request_tokens``, ``decode_text`` from ``self.text``; ``content``
    cuts a draft to what the verify pass scores; ``for_benchmark`` keeps the decoder as it is."""

    text: AutoregressiveDecoder
    eos_ids: frozenset[int]
    gen_length: int

    @property
    def max_context(self) -> int | None:
        return self.text.max_context

    def count_request_tokens(self, messages: Sequence[Message]) -> int:
        return self.text.count_request_tokens(messages)

    def decode_text(self, token_ids: Sequence[int]) -> str:
        return self.text.decode_text(token_ids)

    def content(self, draft: Sequence[int]) -> list[int]:
        """The draft positions the verify pass scores: cut after its first EOS (kept: the EOS is a draft
        position too) and to the generation length."""
        return cut_draft(draft, self.eos_ids, self.gen_length)

    def for_benchmark(self, benchmark: str) -> Self:
        """This decoder with a benchmark's own settings; none by default (ReFusion has some)."""
        del benchmark
        return self
