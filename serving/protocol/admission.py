"""The per-replica cap on requests in flight, shared by the HTTP and gRPC listeners.

A request past the cap is refused before its body is read or its work queued (HTTP 503, gRPC
UNAVAILABLE), so an overload costs a short answer instead of memory. Health checks are never
counted or refused: probes must keep answering while the replica is busy.
"""

from __future__ import annotations


class InFlightLimit:
    """Counts requests between ``try_enter`` and ``leave``; refuses past ``limit`` (0: no cap)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.current = 0

    def try_enter(self) -> bool:
        if self.limit and self.current >= self.limit:
            return False
        self.current += 1
        return True

    def leave(self) -> None:
        self.current -= 1

    @property
    def message(self) -> str:
        return f"Server is overloaded: {self.limit} requests are in flight; retry later"
