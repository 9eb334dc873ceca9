"""What a model's own code asks of the server, from inside the model's process.

``pb_utils.InferenceRequest(...).exec()`` / ``async_exec()`` (BLS) and the decoupled
``InferenceResponseSender.send`` reach the server through the one ``ServerLink`` the stub installs
in ``triton_python_backend_utils``. Both may be used from any thread of the model: a BLS request
waits on a future that the channel's reader resolves when the server's answer arrives, so the
stub's main thread stays free to run ``execute``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import queue
import threading
from concurrent.futures import Future
from typing import Any

from serving.backends.python import triton_python_backend_utils as pb_utils
from serving.backends.python.channel import Channel, ChannelClosed, Tensors

SERVER_GONE = "the server went away"

# One answer to a BLS request: a response (None for only the final flag), and whether it is final.
Answer = tuple[pb_utils.InferenceResponse | None, bool]


def encode_response(
    response: pb_utils.InferenceResponse,
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """A response as (error, parameters) plus its output tensors, for a post to the server."""
    error = response.error()
    item = {
        "error": None if error is None else (error.code(), error.message()),
        "parameters": json.loads(response.parameters()),
    }
    outputs = [] if error is not None else response.output_tensors()
    return item, [(t.name(), t.as_numpy()) for t in outputs]


class ServerLink:
    """The model process's way to the server: BLS requests out, their answers back."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        # A request's waiter: a future for one response, ``Answers`` for a decoupled stream.
        self._waiting: dict[int, Future[Answer] | Answers] = {}
        self._cancelled: set[int] = set()  # streams whose client went away
        # Streams whose client lags: their responses wait in ``send`` until it catches up.
        self._held_back: set[int] = set()
        self._flow = threading.Condition()
        # Decoupled requests whose iterator the model dropped unfinished, to cancel (a thread of
        # their own sends it: a finalizer must not send on the channel itself, below).
        self._dropped: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._canceller: threading.Thread | None = None

    def infer(self, request: pb_utils.InferenceRequest) -> Future[Answer]:
        """Send a BLS request; the future resolves to its response (errors included, as Triton)."""
        future: Future[Answer] = Future()
        self._send(request, future, decoupled=False)
        return future

    def stream(self, request: pb_utils.InferenceRequest) -> ResponseIterator:
        """Send a BLS request now; iterate over every response the target sends (a flag-only
        final one is not a response), waiting for each."""
        answers = Answers()
        call = self._send(request, answers, decoupled=True)
        self._start_canceller()
        return ResponseIterator(self, call, answers)

    def tell(self, kind: str, call: int) -> None:
        """Tell the server about the decoupled request ``call`` (``bls_taken``, ``bls_cancel``)."""
        with contextlib.suppress(ChannelClosed):  # its answers end with an error then
            self._channel.send(kind, {"call": call})

    def dropped(self, call: int) -> None:
        """The model dropped the iterator of the unfinished decoupled request ``call``: it is
        cancelled, as gRPC's client cancels a call whose iterator is collected.

        NOTE: called from a finalizer, which may run on any thread at any allocation, that
        thread perhaps inside ``Channel.send`` holding its lock; so only a reentrant-safe
        ``SimpleQueue.put`` here, and the canceller thread sends."""
        self._dropped.put(call)

    def _start_canceller(self) -> None:
        with self._lock:
            if self._canceller is None:
                self._canceller = threading.Thread(
                    target=self._cancel_dropped, name="bls-canceller", daemon=True
                )
                self._canceller.start()

    def _cancel_dropped(self) -> None:
        while True:
            self.tell("bls_cancel", self._dropped.get())

    def send(self, stream: int, response: pb_utils.InferenceResponse | None, flags: int) -> None:
        """One decoupled response (or only the final flag) for the request ``stream``; a
        response waits while the server holds the stream back (its client lags), as a gRPC
        sender waits for the client's flow-control window."""
        item, tensors = (None, []) if response is None else encode_response(response)
        if response is not None:
            with self._flow:
                self._flow.wait_for(
                    lambda: stream not in self._held_back or stream in self._cancelled
                )
        if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self._cancelled.discard(stream)
            self._held_back.discard(stream)
        try:
            self._channel.post(
                "response", {"stream": stream, "flags": flags, "item": item}, tensors
            )
        except ChannelClosed:
            raise pb_utils.TritonModelException(
                f"Unable to send the response: {SERVER_GONE}"
            ) from None

    def cancelled(self, stream: int) -> None:
        """The client of the decoupled request ``stream`` went away (on the reader thread)."""
        with self._flow:
            self._cancelled.add(stream)
            self._flow.notify_all()  # a send held back goes on (the server drops it)

    def hold_back(self, stream: int, held_back: bool) -> None:
        """The server holds ``stream``'s responses back, or lets them go (on the reader
        thread)."""
        with self._flow:
            if held_back:
                self._held_back.add(stream)
            else:
                self._held_back.discard(stream)
                self._flow.notify_all()

    def is_cancelled(self, stream: int) -> bool:
        return stream in self._cancelled

    def handle_result(self, payload: dict[str, Any], tensors: Tensors) -> None:
        """One answer to a BLS request (on the channel's reader thread)."""
        error = payload["error"]
        response: pb_utils.InferenceResponse | None = None
        if error is not None:
            response = _error_response(error[1], error[0])
        elif not payload.get("empty"):
            outputs = [pb_utils.Tensor(name, array) for name, array in tensors.items()]
            response = pb_utils.InferenceResponse(outputs, parameters=payload["parameters"])
        self._resolve(payload["call"], (response, payload["final"]))

    def fail_all(self) -> None:
        """The server went away: every waiting BLS request gets an error response."""
        with self._lock:
            calls = list(self._waiting)
        for call in calls:
            self._resolve(call, (_error_response(SERVER_GONE), True))

    def _send(
        self,
        request: pb_utils.InferenceRequest,
        waiter: Future[Answer] | Answers,
        *,
        decoupled: bool,
    ) -> int:
        """Post the request; its call id (its answers go to ``waiter``)."""
        call = next(self._ids)
        with self._lock:
            self._waiting[call] = waiter
        payload = {
            "call": call,
            "decoupled": decoupled,
            "model_name": request.model_name(),
            "model_version": request.model_version(),
            "requested": request.requested_output_names(),
            "id": request.request_id(),
            "correlation_id": request.correlation_id(),
            "flags": request.flags(),
            "timeout": request.timeout(),
            "parameters": json.loads(request.parameters()),
        }
        tensors = [(t.name(), t.as_numpy()) for t in request.inputs()]
        try:
            self._channel.post("bls", payload, tensors)
        except ChannelClosed:
            self._resolve(call, (_error_response(SERVER_GONE), True))
        except (TypeError, ValueError) as error:  # a tensor shared memory cannot carry
            code = pb_utils.TritonError.INVALID_ARG
            self._resolve(call, (_error_response(str(error), code), True))
        return call

    def _resolve(self, call: int, answer: Answer) -> None:
        with self._lock:
            waiter = self._waiting.get(call)
            if answer[1]:
                self._waiting.pop(call, None)
        if isinstance(waiter, Future):
            if not waiter.done():
                waiter.set_result(answer)
        elif waiter is not None:
            waiter.put(answer)


class Answers:
    """A decoupled BLS request's answers, put by the channel's reader thread and taken in order
    by one taker: a thread of the model (``get``) or a coroutine on its event loop (``aget``,
    which waits without a thread and takes nothing if it is cancelled)."""

    def __init__(self) -> None:
        self._items: collections.deque[Answer] = collections.deque()
        self._ready = threading.Condition()
        # A coroutine waiting in ``aget``: its loop and the future that wakes it.
        self._waker: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def put(self, answer: Answer) -> None:
        with self._ready:
            self._items.append(answer)
            self._ready.notify()
            waker, self._waker = self._waker, None
        if waker is not None:
            loop, woken = waker
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(_wake, woken)

    def get(self) -> Answer:
        with self._ready:
            self._ready.wait_for(lambda: self._items)
            return self._items.popleft()

    async def aget(self) -> Answer:
        loop = asyncio.get_running_loop()
        while True:
            with self._ready:
                if self._items:
                    return self._items.popleft()
                woken = loop.create_future()
                self._waker = (loop, woken)
            await woken


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # NOTE: a wait cancelled meanwhile is done already
        woken.set_result(None)


class ResponseIterator:
    """The responses of a decoupled BLS request as they arrive (``exec(decoupled=True)``), as
    Triton's ``ResponseIterator``: ``cancel()`` ends the request early, and so does dropping
    the iterator before its end (Triton's instead waits there for every response). Beyond
    Triton's, ``async for`` takes them on the model's event loop, without a thread, while other
    coroutines run; a wait for the next one that is cancelled takes nothing."""

    def __init__(self, link: ServerLink, call: int, answers: Answers) -> None:
        self._link = link
        self._call = call
        self._answers = answers
        self._ahead: Answer | None = None  # taken before it was asked for (``first``)
        self._finished = False  # the final answer has been taken
        self._cancelled = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> pb_utils.InferenceResponse:
        while not self._ended():
            response = self._took(self._pop_ahead() or self._answers.get())
            if response is not None:
                return response
        raise StopIteration

    def __aiter__(self) -> ResponseIterator:
        return self

    async def __anext__(self) -> pb_utils.InferenceResponse:
        while not self._ended():
            # NOTE: nothing awaits between taking an answer and returning its response, so a
            # cancelled wait (``asyncio.wait_for``'s timeout) loses none.
            response = self._took(self._pop_ahead() or await self._answers.aget())
            if response is not None:
                return response
        raise StopAsyncIteration

    async def first(self) -> None:
        """Wait until the first answer has come (``async_exec(decoupled=True)`` returns then,
        as Triton's does)."""
        if self._ahead is None and not self._finished:
            self._ahead = await self._answers.aget()
            self._finished = self._ahead[1]

    def _ended(self) -> bool:
        return self._finished and self._ahead is None

    def _pop_ahead(self) -> Answer | None:
        answer, self._ahead = self._ahead, None
        return answer

    def _took(self, answer: Answer) -> pb_utils.InferenceResponse | None:
        """The response of an answer just taken (None for only the final flag)."""
        response, self._finished = answer
        if not self._finished:
            # NOTE: the server posts more only while what this model has not taken fits its
            # bound (``bls.py``), so responses do not pile up here unread.
            self._link.tell("bls_taken", self._call)
        return response

    def cancel(self) -> None:
        """End the request: its model sees it cancelled, and after the responses already on
        their way comes one with a ``CANCELLED`` error."""
        if not self._finished and not self._cancelled:
            self._cancelled = True
            self._link.tell("bls_cancel", self._call)

    def __del__(self) -> None:
        if not self._finished and not self._cancelled:
            self._link.dropped(self._call)


def _error_response(message: str, code: int = pb_utils.TritonError.INTERNAL) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
