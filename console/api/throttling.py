"""DRF's anonymous and per-user throttles, reading their rates when they run.

DRF's own classes copy ``DEFAULT_THROTTLE_RATES`` once, at import; these read the current
settings, so a deployment's (or a test's) rates are the ones applied. Counts live in the default
cache, which settings make one store across console processes.
"""

from __future__ import annotations

from typing import Any

from rest_framework import throttling
from rest_framework.settings import api_settings


class AnonRateThrottle(throttling.AnonRateThrottle):
    """Requests without credentials, per client address (``anon`` rate)."""

    @property
    def THROTTLE_RATES(self) -> Any:  # noqa: N802 - the attribute DRF reads
        return api_settings.DEFAULT_THROTTLE_RATES


class UserRateThrottle(throttling.UserRateThrottle):
    """Requests of one signed-in user or token owner (``user`` rate)."""

    @property
    def THROTTLE_RATES(self) -> Any:  # noqa: N802 - the attribute DRF reads
        return api_settings.DEFAULT_THROTTLE_RATES
