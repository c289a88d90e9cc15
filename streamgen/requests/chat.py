"""The chat vocabulary shared by benchmarks, decoders and the stream procedure (a leaf module), and the
one rendering of a chat for a model without a chat template (a base model such as Gemma-3-270M)."""

from __future__ import annotations

from collections.abc import Sequence

Message = dict[str, str]
"""One chat turn: ``{"role": "system" | "user" | "assistant", "content": str}``."""

PLAIN_SPEAKERS = {"user": "User", "assistant": "Assistant"}
PLAIN_SEPARATOR = "\n\n"


def render_plain(messages: Sequence[Message]) -> str:
    """A chat as a plain transcript, for tokenizers without a chat template (docs/decoding.md).

    The system turn as it is, then every turn as ``User: …`` / ``Assistant: …``, turns separated by a
    blank line, ending with ``Assistant:`` where the answer begins::

        You are an expert Python programmer. …

        User: Write a function that …

        Assistant:

    A request that grows by a segment changes only the text before the final ``Assistant:``, so the
    stream run's cached request prefix stays a prefix. The decoder adds the tokenizer's BOS token in
    front (base Gemma needs it). Any other role is an error: it has no speaker here."""
    parts = []
    for m in messages:
        role = m["role"]
        if role == "system":
            parts.append(m["content"])
        elif role in PLAIN_SPEAKERS:
            parts.append(f"{PLAIN_SPEAKERS[role]}: {m['content']}")
        else:
            raise ValueError(f"render_plain: role {role!r} is not system, user or assistant")
    return PLAIN_SEPARATOR.join([*parts, f"{PLAIN_SPEAKERS['assistant']}:"])
