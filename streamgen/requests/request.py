"""One example as the user composes it (:class:`StreamRequest`): the leaf type both the replayed
stream run (``streamgen.stream``) and the live one (``streamgen.live``) take, so neither imports the
other for it. ``streamgen.stream`` re-exports it, where most callers import it from.

The text sent at step i is :meth:`StreamRequest.state` — prefix i, or with corrections
(``streamgen.timing.corrections``) the screen with its typos, which need not extend the last state.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from streamgen.requests.chat import Message

__all__ = ["Edit", "StreamRequest", "common_prefix_length", "edit_between"]


def common_prefix_length(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Length of the longest common leading run of two sequences (token ids, segments, characters)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Edit:
    """How one state of the request differs from the one before: the first changed character, and the
    characters deleted after it and inserted in their place (an extension deletes none)."""

    first_change_char: int
    chars_deleted: int
    chars_inserted: int


def edit_between(before: str, after: str) -> Edit:
    """The edit that turns ``before`` into ``after``, from their common leading run."""
    n = common_prefix_length(before, after)
    return Edit(n, len(before) - n, len(after) - n)


@dataclass(frozen=True)
class StreamRequest:
    """One example as the user composes it: fixed history, then the final user turn in segments.

    ``states`` (one per segment, the last equal to the request) is the text sent at each step when
    the typist's corrections rewrite it; None: the prefixes. ``correction_keys``: the keystrokes each
    step spent on corrections (None without corrections)."""

    example_id: str
    history: tuple[Message, ...]
    segments: tuple[str, ...]
    system_prompt: str | None = None
    states: tuple[str, ...] | None = None
    correction_keys: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.states is not None and (len(self.states) != len(self.segments) or self.states[-1] != self.text):
            raise ValueError(f"request {self.example_id!r}: {len(self.states)} states for {len(self.segments)} "
                             "segments, or a last state that is not the request (internal invariant)")

    @property
    def text(self) -> str:
        return "".join(self.segments)

    def prefix(self, i: int) -> str:
        """Segments 1..i concatenated (``prefix(n)`` is the complete request)."""
        return "".join(self.segments[:i])

    def state(self, i: int) -> str:
        """The user turn as sent at step ``i`` (``state(0)`` is empty; ``state(n)`` the request): prefix i,
        or with corrections the screen with its typos. Everything a step sends goes through here."""
        if i == 0:
            return ""
        return self.prefix(i) if self.states is None else self.states[i - 1]

    def edit(self, i: int, before: int | None = None) -> Edit:
        """How ``state(i)`` differs from ``state(before)`` (default: the step before)."""
        return edit_between(self.state(i - 1 if before is None else before), self.state(i))

    def messages(self, i: int | None = None) -> list[Message]:
        """System prompt (if any) + history + the user turn as it stands at step ``i`` (None: complete)."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        user = {"role": "user", "content": self.text if i is None else self.state(i)}
        return [*system, *(dict(m) for m in self.history), user]
