"""The one exception a user or configuration error raises, listing every problem and its fix."""

from __future__ import annotations

from collections.abc import Sequence


class ConfigError(ValueError):
    """A user or configuration error; the message lists every problem and how to fix it."""

    def __init__(self, problems: Sequence[str], title: str = "invalid configuration") -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{title} ({len(self.problems)} problem{'s' * (len(self.problems) != 1)}):\n{lines}")


def raise_if_problems(problems: Sequence[str], title: str = "invalid configuration") -> None:
    if problems:
        raise ConfigError(problems, title)
