"""A token bucket: up to ``burst`` tokens, refilled at ``rate_per_s``. Touched on the event loop
only, so no locks."""

from __future__ import annotations

import time


class TokenBucket:
    __slots__ = ("rate_per_s", "burst", "_available", "_stamp")

    def __init__(self, rate_per_s: float, burst: float) -> None:
        self.rate_per_s, self.burst = rate_per_s, burst
        self._available = burst
        self._stamp = time.monotonic()

    def take(self) -> bool:
        """Take one token if there is one."""
        now = time.monotonic()
        self._available = min(self.burst, self._available + (now - self._stamp) * self.rate_per_s)
        self._stamp = now
        if self._available >= 1.0:
            self._available -= 1.0
            return True
        return False

    def wait_s(self) -> float:
        """Seconds until the next token, as of the last ``take``."""
        return max(0.0, 1.0 - self._available) / self.rate_per_s
