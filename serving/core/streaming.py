"""A decoupled request's responses: any number, pushed from any thread, read in order on the loop.

The server core creates one ``ResponseStream`` per request it streams (``InferenceServer.
infer_stream``) and hangs it on the request (``InferRequest.responses``); the backend that runs a
decoupled model puts each response there as the model sends it, the last one marked final.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from serving.core.types import InferResponse
from serving.errors import ServingError

# One streamed item: a response, the error the request failed with, or None (only the final flag).
StreamItem = tuple[InferResponse | ServingError | None, bool]


class ResponseStream:
    """The responses of one request, in the order the model sent them, until the final one."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()
        self.cancelled = False
        # Set by the backend running the request: tell the model its client went away.
        self.on_cancel: Callable[[], None] | None = None

    def cancel(self) -> None:
        """The client stopped reading before the final response (on the loop)."""
        self.cancelled = True
        if self.on_cancel is not None:
            self.on_cancel()

    def put(self, item: InferResponse | ServingError | None, *, final: bool) -> None:
        """Queue one item; safe from any thread. Items after the final one are never read."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is reading
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (item, final))

    async def items(self) -> AsyncIterator[StreamItem]:
        """Every item up to and including the final one."""
        while True:
            item = await self._queue.get()
            yield item
            if item[1]:
                return
