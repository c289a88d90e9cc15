"""One example as the user composes it (:class:`StreamRequest`): the leaf type both the replayed
stream run (``streamgen.stream``) and the live one (``streamgen.live``) take, so neither imports the
other for it. ``streamgen.stream`` re-exports it, where most callers import it from.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamgen.requests.chat import Message

__all__ = ["StreamRequest"]


@dataclass(frozen=True)
class StreamRequest:
    """One example as the user composes it: fixed history, then the final user turn in segments."""

    example_id: str
    history: tuple[Message, ...]
    segments: tuple[str, ...]
    system_prompt: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.segments)

    def prefix(self, i: int) -> str:
        """Segments 1..i concatenated (``prefix(n)`` is the complete request)."""
        return "".join(self.segments[:i])

    def messages(self, i: int | None = None) -> list[Message]:
        """System prompt (if any) + history + the user turn as it stands after ``i`` segments."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        user = {"role": "user", "content": self.text if i is None else self.prefix(i)}
        return [*system, *(dict(m) for m in self.history), user]
