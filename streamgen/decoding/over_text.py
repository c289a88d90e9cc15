"""The Decoder-protocol members a diffusion family delegates to the autoregressive decoder it carries.

ReFusion, bidirectional and DiffusionGemma decoders each hold ``text``, an
:class:`~streamgen.families.autoregressive.decoder.AutoregressiveDecoder` over the same weights that renders the
request, checks the context, detokenises and owns the meter. :class:`OverText` gives them those members
once, plus the draft cut every verify pass scores.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Self

from streamgen.decoding.stops import stop_length
from streamgen.decoding.verification import cut_draft
from streamgen.requests.chat import Message

if TYPE_CHECKING:
    from streamgen.families.autoregressive.decoder import AutoregressiveDecoder


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
        position too), to the generation length, and after the token completing its first stop string."""
        cut = cut_draft(draft, self.eos_ids, self.gen_length)
        stop = self.stop_length(cut)
        return cut if stop is None else cut[:stop]

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return self.text.stop_strings

    def with_stop_strings(self, strings: Sequence[str]) -> Self:
        """This decoder (same weights, settings and meter) ending its answers after the token completing one
        of ``strings``, as it ends them at EOS (docs/diffusion.md, "Stop strings")."""
        text = self.text.with_stop_strings(strings)
        if text is self.text:
            return self
        twin = copy.copy(self)
        twin.text = text
        return twin

    def stop_length(self, tokens: Sequence[int | None]) -> int | None:
        """The fewest leading ``tokens`` whose text completes a stop string, looked for in the leading run
        of revealed tokens (a masked position, None or the mask id, ends the text known so far); None:
        no stop string there, or none set."""
        if not self.text.stops:
            return None
        mask = getattr(self, "mask_id", None)
        run: list[int] = []
        for t in tokens:
            if t is None or t == mask:
                break
            run.append(int(t))
        return stop_length(run, self.text.stop_strings, self.text.decode_raw)

    def for_benchmark(self, benchmark: str) -> Self:
        """This decoder with a benchmark's own settings; none by default (ReFusion has some)."""
        del benchmark
        return self
