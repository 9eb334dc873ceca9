"""What a model's own code asks of the server, from inside the model's process.

``pb_utils.InferenceRequest(...).exec()`` / ``async_exec()`` (BLS) and the decoupled
``InferenceResponseSender.send`` reach the server through the one ``ServerLink`` the stub installs
in ``triton_python_backend_utils``. Both may be used from any thread of the model: a BLS request
waits on a future that the channel's reader resolves when the server's answer arrives, so the
stub's main thread stays free to run ``execute``.
"""

from __future__ import annotations

import asyncio
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
        # A request's waiter: a future for one response, a queue for a decoupled stream.
        self._waiting: dict[int, Future[Answer] | queue.SimpleQueue[Answer]] = {}
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
        answers: queue.SimpleQueue[Answer] = queue.SimpleQueue()
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
        waiter: Future[Answer] | queue.SimpleQueue[Answer],
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


class ResponseIterator:
    """The responses of a decoupled BLS request as they arrive (``exec(decoupled=True)``), as
    Triton's ``ResponseIterator``: ``cancel()`` ends the request early, and so does dropping
    the iterator before its end (Triton's instead waits there for every response). Beyond
    Triton's, ``async for`` takes them without holding up the model's event loop."""

    def __init__(self, link: ServerLink, call: int, answers: queue.SimpleQueue[Answer]) -> None:
        self._link = link
        self._call = call
        self._answers = answers
        self._ahead: Answer | None = None  # taken from the queue before it was asked for
        self._finished = False  # the final answer has come
        self._cancelled = False
        # ``async for``'s wait for the next response in the executor, kept until that response
        # is taken: a wait cancelled (``asyncio.wait_for``'s timeout) leaves it running, and
        # the next ``__anext__`` takes its response instead of losing it to a second wait.
        self._next_in_executor: asyncio.Future[pb_utils.InferenceResponse | None] | None = None

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> pb_utils.InferenceResponse:
        while (answer := self._next_answer()) is not None:
            response, final = answer
            if not final:
                # NOTE: the server posts more only while what this model has not taken fits
                # its bound (``bls.py``), so responses do not pile up here unread.
                self._link.tell("bls_taken", self._call)
            if response is not None:
                return response
        raise StopIteration

    def __aiter__(self) -> ResponseIterator:
        return self

    async def __anext__(self) -> pb_utils.InferenceResponse:
        if self._next_in_executor is None:
            loop = asyncio.get_running_loop()
            self._next_in_executor = loop.run_in_executor(None, self._next_or_none)
        response = await asyncio.shield(self._next_in_executor)
        self._next_in_executor = None
        if response is None:
            raise StopAsyncIteration
        return response

    def wait_first(self) -> None:
        """Wait until the first answer has come (``async_exec(decoupled=True)`` returns then,
        as Triton's does)."""
        if self._ahead is None and not self._finished:
            self._ahead = self._answers.get()
            self._finished = self._ahead[1]

    def _next_answer(self) -> Answer | None:
        """The next answer: one taken ahead, else the queue's; None after the final one."""
        if self._ahead is not None:
            answer, self._ahead = self._ahead, None
            return answer
        if self._finished:
            return None
        answer = self._answers.get()
        self._finished = answer[1]
        return answer

    def _next_or_none(self) -> pb_utils.InferenceResponse | None:
        return next(self, None)

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
