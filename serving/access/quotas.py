"""Per-token quotas on one replica: a token bucket for requests per second, a concurrency count.

All state is touched on the event loop only (both transports run there), so no locks.
"""

from __future__ import annotations

import math

from serving.access.table import TokenGrant
from serving.core.token_bucket import TokenBucket


class QuotaState:
    """The live counters of one token; limits follow the token table, counters survive swaps."""

    __slots__ = ("bucket", "in_flight", "max_concurrency", "rate_rps")

    def __init__(self, grant: TokenGrant) -> None:
        self.in_flight = 0
        self.rate_rps: float | None = None
        self.bucket: TokenBucket | None = None
        self.max_concurrency: int | None = None
        self.update(grant)

    def update(self, grant: TokenGrant) -> None:
        if grant.rate_limit_rps != self.rate_rps:
            self.rate_rps = grant.rate_limit_rps
            # A second's worth of requests may come at once (at least one).
            self.bucket = None if self.rate_rps is None else TokenBucket(
                self.rate_rps, burst=max(1.0, self.rate_rps))  # fmt: skip
        self.max_concurrency = grant.max_concurrency

    def take_rate(self) -> int:
        """0 when a request may go now, else whole seconds until it may (at least 1)."""
        if self.bucket is None or self.bucket.take():
            return 0
        return max(1, math.ceil(self.bucket.wait_s()))

    def enter(self) -> bool:
        if self.max_concurrency is not None and self.in_flight >= self.max_concurrency:
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1


def has_quota(grant: TokenGrant) -> bool:
    return grant.rate_limit_rps is not None or grant.max_concurrency is not None
