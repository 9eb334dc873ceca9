"""The one error of the config package."""

from __future__ import annotations

from collections.abc import Iterable


class ConfigError(Exception):
    """A model configuration that cannot be used; ``problems`` lists every problem found.

    Each problem names the field it is about (``input[1].dims: ...``). ``code`` is stable.
    """

    code = "invalid_config"

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: list[str] = list(problems) or ["invalid model configuration"]
        super().__init__("; ".join(self.problems))
