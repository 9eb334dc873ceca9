"""A decoupled request's responses: any number, pushed from any thread, read in order on the loop.

The server core creates one ``ResponseStream`` per request it streams (``InferenceServer.
infer_stream``) and hangs it on the request (``InferRequest.responses``); the backend that runs a
decoupled model puts each response there as the model sends it, the last one marked final.

A model may send faster than its client reads, and the responses in between wait here.
``UnreadResponses`` bounds them per request, as HTTP/2's flow control bounds a gRPC sender:
past ``--max-unread-response-bytes`` waiting, the stream asks the backend to hold the model's
sends back (``on_flow(True)``; the Python backend's ``response_sender.send`` then waits), and
lets them go again once the client has read half of it (``on_flow(False)``). A client that does
not read that half within ``--unread-response-timeout-secs`` (a held-back sender is a model
thread, or its whole instance, waiting), or a model that goes on sending to twice the limit,
ends the request: an ``UNAVAILABLE`` error after the responses already waiting, and the model is
told the request was cancelled (``is_cancelled()``), as when the client leaves. Triton lets them
pile up without bound; here one stream holds at most about twice the limit, whoever its client
is, and holds a model back for at most the timeout at a time.

With a replica budget of request bytes (``--max-in-flight-request-bytes``), the responses waiting
here count in it too until they are read, so that many streams whose clients lag make new
requests wait instead of holding twice the limit each outside the budget. The stream's owner
``close``s it when it is done with it, which gives back whatever still waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from serving.core.request_bytes import RequestBytesBudget, tensor_bytes
from serving.core.types import InferResponse
from serving.errors import ServingError, UnavailableError

# One streamed item: a response, the error the request failed with, or None (only the final flag).
StreamItem = tuple[InferResponse | ServingError | None, bool]

# What a response costs waiting beyond its tensors' bytes: a small one-output response with its
# queue entry measured about 540 bytes (tracemalloc), so a model streaming tiny responses (tokens)
# is bounded by their count too, not only by their few tensor bytes.
RESPONSE_OVERHEAD_BYTES = 512


class UnreadResponses:
    """The replica's bound on the response bytes one streamed request may have waiting for its
    client (``limit``, 0: none) and on how long a stream may stay held back (``timeout_s``),
    and how many requests it ended (a counter for the metrics)."""

    __slots__ = ("ended", "limit", "timeout_s")

    def __init__(self, limit: int, timeout_s: float = 60.0) -> None:
        self.limit = limit
        self.timeout_s = timeout_s
        self.ended = 0


class ResponseStream:
    """The responses of one request, in the order the model sent them, until the final one."""

    def __init__(
        self,
        unread: UnreadResponses | None = None,
        model_name: str = "",
        budget: RequestBytesBudget | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        # Each item with the bytes it counts while it waits (0 with no limit and no budget).
        self._queue: asyncio.Queue[tuple[InferResponse | ServingError | None, bool, int]] = (
            asyncio.Queue()
        )
        self._unread = unread if unread is not None and unread.limit else None
        self._model_name = model_name
        self._budget = budget if budget is not None and budget.limit else None
        self.waiting_bytes = 0
        self.budget_bytes = 0  # of ``waiting_bytes``, those held in the budget
        self.held_back = False  # the model's sends are held back until the client reads
        self._stall: asyncio.TimerHandle | None = None  # while held back: ends a lagging stream
        self._closed = False  # the final item is queued: nothing after it is read
        self.cancelled = False
        # Set by the backend running the request: tell the model its client went away, and
        # hold its sends back (True) or let them go (False).
        self.on_cancel: Callable[[], None] | None = None
        self.on_flow: Callable[[bool], None] | None = None

    def cancel(self) -> None:
        """The client stopped reading before the final response (on the loop)."""
        if self.cancelled:
            return
        self.cancelled = True
        self._disarm()
        if self.on_cancel is not None:
            self.on_cancel()

    def put(self, item: InferResponse | ServingError | None, *, final: bool) -> None:
        """Queue one item; safe from any thread. Items after the final one are never read."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is reading
            self._loop.call_soon_threadsafe(self._offer, item, final)

    def _offer(self, item: InferResponse | ServingError | None, final: bool) -> None:
        """``put`` on the loop: queue the item, holding the model back once its client lags."""
        if self._closed:
            return
        unread = self._unread
        nbytes = response_size(item) if unread is not None or self._budget is not None else 0
        if unread is not None:
            # NOTE: a response is refused only while others wait (alone, it is already in memory
            # and its client is keeping up, so refusing it would save nothing), and a final item
            # never is (the model is done: nothing more will come).
            too_much = self.waiting_bytes + nbytes > 2 * unread.limit
            if too_much and self.waiting_bytes and not final:
                self.end_unread(
                    f"{self.waiting_bytes} bytes were waiting and the next {nbytes} would pass "
                    f"twice the limit of {unread.limit} (--max-unread-response-bytes)"
                )
                return
        self.waiting_bytes += nbytes
        if self._budget is not None:
            self.budget_bytes += self._budget.hold(nbytes)
        self._closed = final
        self._queue.put_nowait((item, final, nbytes))
        held = unread is not None and not final and self.waiting_bytes > unread.limit
        if held and not self.held_back:
            self._hold_back(True)

    def _hold_back(self, held: bool) -> None:
        assert self._unread is not None
        self.held_back = held
        if self.on_flow is not None:
            self.on_flow(held)
        self._disarm()
        if held:
            self._stall = self._loop.call_later(self._unread.timeout_s, self._stalled)

    def _disarm(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _stalled(self) -> None:
        """Held back for the timeout: the client did not read half of what waits."""
        assert self._unread is not None
        self._stall = None
        if self._closed:  # the model has finished: what waits is all it will hold
            return
        self.end_unread(
            f"they waited past the limit of {self._unread.limit} (--max-unread-response-bytes) "
            f"for {self._unread.timeout_s:g} s (--unread-response-timeout-secs), "
            f"{self.waiting_bytes} bytes still waiting"
        )

    def end(self, error: ServingError) -> None:
        """End the request now (on the loop): ``error`` is its last item, after the responses
        already waiting; nothing the model sends after it is read, and the model is told the
        request was cancelled."""
        if self._closed:
            return
        self._closed = True
        self._queue.put_nowait((error, True, 0))
        self.cancel()

    def end_unread(self, why: str) -> None:
        """End the request for a client that does not read (on the loop): an error after what
        waits, counted in ``UnreadResponses.ended``. A request already ended, or whose client
        has gone, is left as it is and not counted, so two reasons to end one request (this
        stream's stall and a BLS caller's lag, ``bls.py``) count it once."""
        if self._unread is None or self._closed or self.cancelled:
            return
        self._unread.ended += 1
        self.end(
            UnavailableError(
                f"the client of a streamed request for model '{self._model_name}' did not read "
                f"its responses: {why}; the request was cancelled"
            )
        )

    async def items(self) -> AsyncIterator[StreamItem]:
        """Every item up to and including the final one."""
        while True:
            item, final, nbytes = await self._queue.get()
            self.waiting_bytes -= nbytes
            if self._budget is not None:
                self._budget.give_back(nbytes)
                self.budget_bytes -= nbytes
            if self.held_back:
                self._taken_while_held_back()
            yield item, final
            if final:
                return

    def close(self) -> None:
        """The owner is done reading (on the loop): what still waits is given back to the
        budget, and nothing sent after this counts in it (it is never read)."""
        if self._budget is not None:
            self._budget.give_back(self.budget_bytes)
            self.budget_bytes = 0
            self._budget = None

    def _taken_while_held_back(self) -> None:
        assert self._unread is not None
        # NOTE: once ended the model's sends are dropped, held back or not.
        if not self.cancelled and self.waiting_bytes <= self._unread.limit // 2:
            self._hold_back(False)


def response_size(item: InferResponse | ServingError | None) -> int:
    """The bytes one streamed item counts while it waits for its client."""
    if isinstance(item, InferResponse):
        return tensor_bytes(item.outputs) + RESPONSE_OVERHEAD_BYTES
    return RESPONSE_OVERHEAD_BYTES
