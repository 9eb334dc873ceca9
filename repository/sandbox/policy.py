"""Whether checks run sandboxed, and with which bubblewrap: read from settings at call time."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from django.conf import settings

SANDBOX_OFF = "off"
SANDBOX_BWRAP = "bwrap"
MODES = (SANDBOX_BWRAP, SANDBOX_OFF)


@dataclasses.dataclass(frozen=True)
class SandboxPolicy:
    """``mode`` is ``bwrap`` (the default) or ``off`` (an admin's explicit, audited choice)."""

    mode: str
    bwrap_path: Path
    pass_env: tuple[str, ...]

    @classmethod
    def from_settings(cls) -> SandboxPolicy:
        mode = str(settings.PORTICO_VALIDATION_SANDBOX).strip().lower()
        return cls(
            # NOTE: anything but an exact "off" keeps the sandbox on; a typo must not disable it.
            mode=SANDBOX_OFF if mode == SANDBOX_OFF else SANDBOX_BWRAP,
            bwrap_path=Path(settings.PORTICO_VALIDATION_BWRAP_PATH),
            pass_env=tuple(settings.PORTICO_VALIDATION_SANDBOX_PASS_ENV),
        )

    @property
    def enabled(self) -> bool:
        return self.mode != SANDBOX_OFF


def sandbox_disabled() -> bool:
    """True when an admin switched the validation sandbox off (the console shows a red banner)."""
    return not SandboxPolicy.from_settings().enabled
