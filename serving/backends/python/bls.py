"""A Python model's BLS requests, run on the server the model is loaded in.

The channel's reader hands each request over with its tensors already copied out; a thread of its
own turns it into an ``InferRequest``, runs it through the server's own ``infer`` (the
``infer_host`` the server core gave the instance: the target model's scheduler, batching and
statistics as for any client) and posts the response back; a decoupled request
(``exec(decoupled=True)``) gets every response of the target's stream, each marked final or not.
Failures (unknown model, bad input) are answered as a response with an error, as Triton does.
Each answer comes within the request's own ``timeout`` (microseconds) or the config parameter
``bls_timeout_s`` (default 300), so a model that calls itself or a cycle of models fails the
request instead of hanging forever.

A decoupled request's caller is a client like any other: the responses posted to it that it has
not taken from its iterator (the model's process says each time it takes one, ``taken``) are
bounded by ``--max-unread-response-bytes``. Past it the next one waits here and the target's
stream holds the target back; a caller that takes nothing for ``--unread-response-timeout-secs``
while it waits gets an ``UNAVAILABLE`` error after what it has not taken, and the target's
request is ended as for a network client that does not read (and counted with them).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Generator
from typing import Any

import numpy as np

from serving.backends.python.channel import Channel, ChannelClosed, Tensors
from serving.backends.python.error_codes import TRITON_CODES
from serving.core.loading import InferHost
from serving.core.streaming import StreamItem, response_size
from serving.core.types import InferRequest, InferResponse, RequestedOutput
from serving.errors import ErrorCode, InternalError, ServingError, UnavailableError

logger = logging.getLogger(__name__)

DEFAULT_BLS_TIMEOUT_S = 300.0
_FLAG_START = 1
_FLAG_END = 2


class CallerWindow:
    """The response bytes posted to a decoupled BLS request's caller that it has not taken."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0: no bound
        self.unread = 0
        self.request: InferRequest | None = None  # once built
        self.cancelled = False  # the caller cancelled the request (``ResponseIterator.cancel``)
        self._sizes: collections.deque[int] = collections.deque()  # of each untaken response
        self._changed = threading.Condition()

    def make_room(self, nbytes: int, timeout_s: float) -> bool:
        """Count ``nbytes`` about to be posted, once what the caller has not taken leaves room
        for them (a response alone always has room); False when the caller took nothing for
        ``timeout_s`` while this waited."""
        with self._changed:
            while self.limit and self.unread and self.unread + nbytes > self.limit:
                if self.cancelled:  # what is left goes: the request's end is near
                    break
                if not self._changed.wait(timeout_s):  # woken by each response taken
                    return False
            self._sizes.append(nbytes)
            self.unread += nbytes
            return True

    def taken(self) -> None:
        """The caller took the oldest response posted to it."""
        with self._changed:
            if self._sizes:
                self.unread -= self._sizes.popleft()
            self._changed.notify_all()

    def cancel(self) -> None:
        """The caller cancelled: what is left goes without waiting for room."""
        with self._changed:
            self.cancelled = True
            self._changed.notify_all()


class BlsBridge:
    """Runs the BLS requests of one instance's model process."""

    def __init__(self, *, model_name: str, host: InferHost | None, timeout_s: float) -> None:
        self.model_name = model_name
        self.host = host
        self.timeout_s = timeout_s
        self._closed = False
        # The open decoupled requests' windows, by the channel and call they came in on.
        self._windows: dict[tuple[Channel, int], CallerWindow] = {}
        self._windows_lock = threading.Lock()

    def submit(self, channel: Channel, payload: dict[str, Any], tensors: Tensors) -> None:
        """Answer one request on a thread of its own (called on the channel's reader thread,
        which must never block)."""
        if self._closed:
            return
        # NOTE: daemon threads: one waiting on a server that stopped must not hold up the exit.
        threading.Thread(
            target=self._answer,
            args=(channel, payload, tensors),
            name=f"bls-{self.model_name}",
            daemon=True,
        ).start()

    def close(self) -> None:
        """Take no more requests (the instance is unloading); running ones end on their own."""
        self._closed = True

    def taken(self, channel: Channel, call: int) -> None:
        """The model took a response of its decoupled request ``call`` (on the channel's reader
        thread)."""
        with self._windows_lock:
            window = self._windows.get((channel, call))
        if window is not None:
            window.taken()

    def cancel(self, channel: Channel, call: int) -> None:
        """The model cancelled its decoupled request ``call`` (on the channel's reader thread):
        the request ends ``CANCELLED`` after the responses already on their way."""
        with self._windows_lock:
            window = self._windows.get((channel, call))
        if window is not None:
            window.cancel()
            self._cancel_request(window)

    def _cancel_request(self, window: CallerWindow) -> None:
        if self.host is not None and window.request is not None:
            self.host.cancel_from_thread(window.request)

    def _answer(self, channel: Channel, payload: dict[str, Any], tensors: Tensors) -> None:
        call = payload["call"]
        window = self._open_window(channel, call) if payload["decoupled"] else None
        results = self._results(payload, tensors, window)
        try:
            for item, final in results:
                if window is not None and not final and not self._room(window, item):
                    item, final = self._caller_lagged(window), True
                if not self._post(channel, call, item, final):
                    return
                if window is not None and window.cancelled:
                    # NOTE: again after each response: a cancel that came before the stream
                    # began found nothing to end.
                    self._cancel_request(window)
        finally:
            results.close()  # NOTE: a stream left early stops its request
            if window is not None:
                with self._windows_lock:
                    self._windows.pop((channel, call), None)

    def _open_window(self, channel: Channel, call: int) -> CallerWindow:
        limit = self.host.unread_responses.limit if self.host is not None else 0
        window = CallerWindow(limit)
        with self._windows_lock:
            self._windows[(channel, call)] = window
        return window

    def _room(self, window: CallerWindow, item: InferResponse | ServingError | None) -> bool:
        """Wait until the caller has room for ``item``; False if it stopped taking responses."""
        assert self.host is not None  # without one, the only answer is a final error
        nbytes = response_size(item)
        return window.make_room(nbytes, self.host.unread_responses.timeout_s)

    def _caller_lagged(self, window: CallerWindow) -> UnavailableError:
        assert self.host is not None
        timeout_s = self.host.unread_responses.timeout_s
        logger.warning(
            "model '%s' took none of the responses of a decoupled BLS request for %g s",
            self.model_name,
            timeout_s,
        )
        if window.request is not None:  # NOTE: ended here, so the metrics count it
            why = f"model '{self.model_name}' (its BLS caller) took none for {timeout_s:g} s"
            self.host.end_unread_from_thread(window.request, why)
        return UnavailableError(
            f"model '{self.model_name}' did not take the responses of its decoupled BLS request: "
            f"the {window.unread} bytes it had not taken left the next response no room within "
            f"the limit of {window.limit} (--max-unread-response-bytes) for {timeout_s:g} s "
            "(--unread-response-timeout-secs); the request was cancelled"
        )

    def _post(
        self, channel: Channel, call: int, item: InferResponse | ServingError | None, final: bool
    ) -> bool:
        """Send one answer to the model; False once no more can go (the request is over)."""
        result, outputs = _encoded(item)
        result.update(call=call, final=final)
        try:
            channel.post("bls_result", result, outputs)
        except TypeError as error:  # an output dtype shared memory cannot carry
            result, outputs = _encoded(InternalError(str(error)))
            result.update(call=call, final=True)
            with contextlib.suppress(ChannelClosed):
                channel.post("bls_result", result, outputs)
            return False
        except ChannelClosed:
            return False  # the model's process went away while its request ran
        return not final

    def _results(
        self, payload: dict[str, Any], tensors: Tensors, window: CallerWindow | None
    ) -> Generator[StreamItem, None, None]:
        """The answers to one request: one response, or a decoupled model's stream of them."""
        try:
            if self.host is None:
                raise UnavailableError(
                    f"model '{self.model_name}' does not run inside a server: BLS is unavailable"
                )
            request, timeout_s = self._request(payload, tensors)
            if window is not None:
                window.request = request
            if payload["decoupled"]:
                yield from self.host.stream_from_thread(request, timeout_s)
            else:
                yield self.host.infer_from_thread(request, timeout_s), True
        except ServingError as error:
            yield error, True
        except Exception as error:  # noqa: BLE001 - the model gets the error, the server goes on
            logger.exception("BLS request from model '%s' failed", self.model_name)
            yield InternalError(f"{type(error).__name__}: {error}"), True

    def _request(self, payload: dict[str, Any], tensors: Tensors) -> tuple[InferRequest, float]:
        version = int(payload["model_version"])
        requested = payload["requested"]
        flags = int(payload["flags"])
        timeout_us = int(payload["timeout"] or 0)
        request = InferRequest(
            model_name=payload["model_name"],
            inputs=tensors,
            model_version=version if version >= 0 else None,
            id=payload["id"],
            outputs=[RequestedOutput(name) for name in requested] if requested else None,
            parameters=dict(payload["parameters"]),
            timeout_us=timeout_us,
            sequence_id=payload["correlation_id"],
            sequence_start=bool(flags & _FLAG_START),
            sequence_end=bool(flags & _FLAG_END),
        )
        return request, timeout_us / 1e6 if timeout_us > 0 else self.timeout_s


def _encoded(
    item: InferResponse | ServingError | None,
) -> tuple[dict[str, Any], list[tuple[str, np.ndarray[Any, Any]]]]:
    if isinstance(item, ServingError):
        return _error(item), []
    if item is None:  # only the final flag
        return {"error": None, "parameters": {}, "empty": True}, []
    return {"error": None, "parameters": item.parameters}, list(item.outputs.items())


def _error(error: ServingError) -> dict[str, Any]:
    code = TRITON_CODES.get(error.code, TRITON_CODES[ErrorCode.INTERNAL])
    return {"error": (code, error.message), "parameters": {}}
