"""The chat vocabulary shared by benchmarks, decoders and the stream procedure (a leaf module)."""

from __future__ import annotations

Message = dict[str, str]
"""One chat turn: ``{"role": "system" | "user" | "assistant", "content": str}``."""
