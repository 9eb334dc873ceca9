"""Slow bodies: between two reads of a request body, no more than a time limit may pass.

A client that sends its headers and then trickles its body, or stops sending it, holds a
connection and a place under the in-flight cap (``InFlightLimit``) for as long as it likes. Like
nginx's ``client_body_timeout``, the limit is not on the whole body (a large body on a slow link
is fine) but on the silence between two reads: when it passes, the client gets 408 and the
connection is closed, which ends the request and gives its place back.

Only the client's silence counts: while the server itself has stopped reading (uvicorn pauses a
connection whose application has not taken the last chunk yet) or has not yet answered
``Expect: 100-continue``, the clock starts again, so a busy server never times a client out for
its own delay.
"""

from __future__ import annotations

import asyncio

from serving.protocol.http.header_timeout import HeaderTimeoutProtocol, request_timeout_answer

_REQUEST_TIMEOUT = request_timeout_answer("request body was not received in time")


class BodyTimeoutProtocol(HeaderTimeoutProtocol):
    """The header deadline, and a limit on the silence between two reads of a body."""

    body_timeout_s = 60.0
    _last_read_s = 0.0
    _in_body = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._body_deadline = self._deadline(self._body_too_slow)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        # NOTE: as the header deadline, the timer is only set when it is not running already: a
        # request notes the time, and a timer that fires between bodies finds nothing to do.
        self._last_read_s = self.loop.time()
        self._in_body = True
        if not self._body_deadline.armed:
            self._body_deadline.arm(self.body_timeout_s)

    def on_body(self, body: bytes) -> None:
        self._last_read_s = self.loop.time()  # NOTE: no timer per chunk: it is checked on firing
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        super().on_message_complete()

    def _body_too_slow(self) -> None:
        if not self._in_body:
            return  # the body is complete: the next request's headers set the timer again
        if self._server_is_waiting():
            self._last_read_s = self.loop.time()
        remaining_s = self._last_read_s + self.body_timeout_s - self.loop.time()
        if remaining_s > 0:
            self._body_deadline.arm(remaining_s)
            return
        # NOTE: an application that has begun its answer (it refused the request without
        # reading the body) has said what there was to say; the connection just closes.
        started = self.cycle is not None and self.cycle.response_started
        self._time_out(_REQUEST_TIMEOUT, answer=not started)

    def _server_is_waiting(self) -> bool:
        """The silence is the server's: it paused reading, or a client that asked for
        ``Expect: 100-continue`` has not been told to go on yet."""
        waiting_to_continue = self.cycle is not None and self.cycle.waiting_for_100_continue
        return self.flow.read_paused or waiting_to_continue


def client_timeouts_protocol(
    header_timeout_s: float, body_timeout_s: float
) -> type[BodyTimeoutProtocol]:
    """The protocol class for uvicorn's ``http=`` option, with this listener's limits."""
    limits = {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s}
    return type("ClientTimeoutsProtocol", (BodyTimeoutProtocol,), limits)
