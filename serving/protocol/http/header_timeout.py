"""Slow clients: every request's headers must arrive within a time limit.

uvicorn closes idle keep-alive connections, but not a connection that sends nothing, nor one whose
request headers arrive a byte at a time (slowloris): such a client holds a socket, and a file
descriptor, for as long as it likes, and enough of them exhaust the process's descriptors so that
even health probes are refused. This protocol starts a timer when a connection opens and when a
request begins; complete headers stop it, and a connection that is still in its headers when it
fires gets 408 and is closed. Bodies have their own limit (``body_timeout``).

The timer is not set and cancelled per request: a request's start only notes the time, and a timer
that fires checks the time noted and sets itself again for what is left (or stays unset while the
connection is between requests). A keep-alive connection thus costs a timer every
``header_timeout_s``, not two timer operations per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from serving.protocol.http.data_plane_protocol import DataPlaneProtocol


def request_timeout_answer(message: str) -> bytes:
    """A whole 408 answer in Triton's JSON error shape, written straight to the socket."""
    body = orjson.dumps({"error": message})
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )


_REQUEST_TIMEOUT = request_timeout_answer("request headers were not received in time")


class Deadline:
    """One timer on the loop that can be set again and again; ``callback`` runs when it fires."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop, self._callback = loop, callback
        self._timer: asyncio.TimerHandle | None = None

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self, delay_s: float) -> None:
        self.disarm()
        self._timer = self._loop.call_later(delay_s, self._fire)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self._callback()


class HeaderTimeoutProtocol(DataPlaneProtocol):
    """uvicorn's httptools protocol (with disconnect watches) and a deadline on request headers
    (see the module)."""

    header_timeout_s = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadlines: list[Deadline] = []
        self._header_deadline = self._deadline(self._header_deadline_fired)
        self._headers_since_s: float | None = self.loop.time()  # None: not inside headers
        self._header_deadline.arm(self.header_timeout_s)

    def _deadline(self, callback: Callable[[], None]) -> Deadline:
        """A deadline of this connection's, disarmed when the connection is lost."""
        deadline = Deadline(self.loop, callback)
        self._deadlines.append(deadline)
        return deadline

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._headers_since_s = self.loop.time()
        if not self._header_deadline.armed:
            self._header_deadline.arm(self.header_timeout_s)

    def on_headers_complete(self) -> None:
        self._headers_since_s = None  # NOTE: the timer runs on; it finds nothing to do
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        for deadline in self._deadlines:
            deadline.disarm()
        super().connection_lost(exc)

    def _header_deadline_fired(self) -> None:
        if self._headers_since_s is None:
            return  # between requests: the next one sets the timer again
        remaining_s = self._headers_since_s + self.header_timeout_s - self.loop.time()
        if remaining_s > 0:
            self._header_deadline.arm(remaining_s)
            return
        # NOTE: only between responses; a pipelined request behind a running one just closes.
        self._time_out(_REQUEST_TIMEOUT, answer=self.cycle is None or self.cycle.response_complete)

    def _time_out(self, timeout_answer: bytes, *, answer: bool) -> None:
        """Close the connection, with ``timeout_answer`` first when ``answer``."""
        if self.transport.is_closing():
            return
        if answer:
            self.transport.write(timeout_answer)
        self.transport.close()
