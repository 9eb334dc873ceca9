"""Slow clients: every request's headers must arrive within a time limit.

uvicorn closes idle keep-alive connections, but not a connection that sends nothing, nor one whose
request headers arrive a byte at a time (slowloris): such a client holds a socket, and a file
descriptor, for as long as it likes, and enough of them exhaust the process's descriptors so that
even health probes are refused. This protocol starts a timer when a connection opens and when a
request begins; complete headers stop it, and a connection that is still in its headers when it
fires gets 408 and is closed. Bodies are not timed here: a request reading its body is in flight,
and the in-flight cap (``InFlightLimit``) bounds how many of those there are.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_TIMEOUT_BODY = b'{"error":"request headers were not received in time"}'
_REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on request headers (see the module)."""

    header_timeout_s = 30.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        # NOTE: only between responses; a pipelined request behind a running one just closes.
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(_REQUEST_TIMEOUT)
        self.transport.close()


def header_timeout_protocol(timeout_s: float) -> type[HeaderTimeoutProtocol]:
    """The protocol class for uvicorn's ``http=`` option, with this listener's deadline."""
    return type("HeaderTimeoutProtocol", (HeaderTimeoutProtocol,), {"header_timeout_s": timeout_s})
