"""A decoupled request's responses: any number, pushed from any thread, read in order on the loop.

The server core creates one ``ResponseStream`` per request it streams (``InferenceServer.
infer_stream``) and hangs it on the request (``InferRequest.responses``); the backend that runs a
decoupled model puts each response there as the model sends it, the last one marked final.

A model may send faster than its client reads (a client that stops reading is the extreme case),
and the responses in between wait here. ``UnreadResponses`` bounds them per request
(``--max-unread-response-bytes``): a response that would take what waits past the limit ends the
request instead, with an ``UNAVAILABLE`` error after the responses already waiting, and the model
is told the request was cancelled (``is_cancelled()``), as when the client leaves. Triton lets
them pile up without bound; here one stream holds at most about the limit, whoever its client is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from serving.core.request_bytes import tensor_bytes
from serving.core.types import InferResponse
from serving.errors import ServingError, UnavailableError

# One streamed item: a response, the error the request failed with, or None (only the final flag).
StreamItem = tuple[InferResponse | ServingError | None, bool]

# What a response costs waiting beyond its tensors' bytes: a small one-output response with its
# queue entry measured about 540 bytes (tracemalloc), so a model streaming tiny responses (tokens)
# is bounded by their count too, not only by their few tensor bytes.
RESPONSE_OVERHEAD_BYTES = 512


class UnreadResponses:
    """The replica's limit on the response bytes one streamed request may have waiting for its
    client (0: no limit), and how many requests it ended (a counter for the metrics)."""

    __slots__ = ("ended", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.ended = 0


class ResponseStream:
    """The responses of one request, in the order the model sent them, until the final one."""

    def __init__(self, unread: UnreadResponses | None = None, model_name: str = "") -> None:
        self._loop = asyncio.get_running_loop()
        # Each item with the bytes it counts while it waits (0 with no limit).
        self._queue: asyncio.Queue[tuple[InferResponse | ServingError | None, bool, int]] = (
            asyncio.Queue()
        )
        self._unread = unread if unread is not None and unread.limit else None
        self._model_name = model_name
        self.waiting_bytes = 0
        self._closed = False  # the final item is queued: nothing after it is read
        self.cancelled = False
        # Set by the backend running the request: tell the model its client went away.
        self.on_cancel: Callable[[], None] | None = None

    def cancel(self) -> None:
        """The client stopped reading before the final response (on the loop)."""
        if self.cancelled:
            return
        self.cancelled = True
        if self.on_cancel is not None:
            self.on_cancel()

    def put(self, item: InferResponse | ServingError | None, *, final: bool) -> None:
        """Queue one item; safe from any thread. Items after the final one are never read."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is reading
            self._loop.call_soon_threadsafe(self._offer, item, final)

    def _offer(self, item: InferResponse | ServingError | None, final: bool) -> None:
        """``put`` on the loop: queue the item, or end the request when its client lags."""
        if self._closed:
            return
        nbytes = 0
        if self._unread is not None:
            nbytes = _waiting_size(item)
            # NOTE: a response is refused only while others wait: alone, it is already in memory
            # and its client is keeping up, so refusing it would save nothing.
            if self.waiting_bytes and self.waiting_bytes + nbytes > self._unread.limit:
                self._end_unread(nbytes)
                return
        self.waiting_bytes += nbytes
        self._closed = final
        self._queue.put_nowait((item, final, nbytes))

    def _end_unread(self, refused_bytes: int) -> None:
        assert self._unread is not None
        self._unread.ended += 1
        self._closed = True
        error = UnavailableError(
            f"the client of a streamed request for model '{self._model_name}' did not read its "
            f"responses: {self.waiting_bytes} bytes were waiting and the next "
            f"{refused_bytes} would pass the limit of {self._unread.limit} "
            f"(--max-unread-response-bytes); the request was cancelled"
        )
        self._queue.put_nowait((error, True, 0))
        self.cancel()

    async def items(self) -> AsyncIterator[StreamItem]:
        """Every item up to and including the final one."""
        while True:
            item, final, nbytes = await self._queue.get()
            self.waiting_bytes -= nbytes
            yield item, final
            if final:
                return


def _waiting_size(item: InferResponse | ServingError | None) -> int:
    if isinstance(item, InferResponse):
        return tensor_bytes(item.outputs) + RESPONSE_OVERHEAD_BYTES
    return RESPONSE_OVERHEAD_BYTES
