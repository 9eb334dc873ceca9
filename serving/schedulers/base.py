"""The scheduler contract: how the server core hands a request to a model version.

One scheduler per loaded model version. It owns that version's instances and its queue. It lives on
the asyncio loop (queues are created inside the running loop), runs instances' blocking ``execute``
calls in threads, and never blocks the loop.
"""

from __future__ import annotations

import abc

from serving.core.types import InferRequest, InferResponse


class Scheduler(abc.ABC):
    @abc.abstractmethod
    async def start(self) -> None:
        """Create queues and workers; called on the running loop once instances are loaded."""

    @abc.abstractmethod
    async def infer(self, request: InferRequest) -> InferResponse:
        """Queue one request and return its response; raise a ServingError on failure."""

    @abc.abstractmethod
    async def stop(self, *, drain_timeout_s: float) -> None:
        """Stop accepting work, let queued and in-flight requests finish (bounded), stop workers."""

    @property
    @abc.abstractmethod
    def queue_depth(self) -> int:
        """Requests waiting, not yet executing."""

    @property
    @abc.abstractmethod
    def in_flight(self) -> int:
        """Requests accepted and not yet answered (queued plus executing)."""
