"""One request and its answer on a data-plane connection (``serving.protocol.http.connection``).

An ``Exchange`` is what the ASGI application sees of the connection: ``receive`` hands it the
request body as it arrives, ``send`` frames its answer (content-length or chunked, HEAD, 204 and
304 without a body, ``connection: close``), and ``run`` answers 500 for an application that fails
before answering. ``write_whole`` writes a complete small answer (status line, headers and body)
in one ``transport.write``: ``send`` writes the status line and headers as soon as
``http.response.start`` arrives and the body on the next message, two system calls and two TCP
segments an answer. The infer path, whose answers are complete and mostly small, uses it, and an
HTTP front-end process hands it the answers the serving process relays back whole.
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from serving.protocol.http.disconnect import DisconnectWatch

if TYPE_CHECKING:
    from serving.protocol.http.connection import DataPlaneConnection

logger = logging.getLogger("serving.http")

Message = MutableMapping[str, Any]
App = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]

# NOTE: built once; HTTP's reason phrases for every status Python knows, none for the others.
STATUS_LINES = {
    s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in http.HTTPStatus
}
# A header name is a token (RFC 9110 5.1); a value holds no control character but tab.
_NOT_TOKEN = re.compile(rb"[\x00-\x20\x7f()<>@,;:\[\]={}\\\"/?]")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_NO_BODY_STATUSES = frozenset((204, 304))
_CONNECTION_CLOSE = b"connection: close\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_DISCONNECT: Message = {"type": "http.disconnect"}
# A body buffered past this many bytes the application has not taken yet pauses reading.
HIGH_WATER_BYTES = 64 * 1024
_SERVER_ERROR = b"Internal Server Error"


def status_line(status: int) -> bytes:
    line = STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d \r\n" % status


class Exchange(DisconnectWatch):
    """One request's ASGI ``receive`` and ``send``, its answer's state, and its disconnect watch
    (one object a request rather than two: the connection tells both when it is lost)."""

    __slots__ = (
        "scope", "keep_alive", "waiting_for_100_continue", "body", "more_body",
        "response_started", "response_complete", "_connection", "_unread", "_waiter",
        "_chunked", "_length_left",
    )  # fmt: skip

    def __init__(
        self,
        scope: MutableMapping[str, Any],
        connection: DataPlaneConnection,
        *,
        keep_alive: bool,
        expect_100_continue: bool,
    ) -> None:
        # NOTE: ``DisconnectWatch.__init__``'s fields, set here without the call it would cost.
        self.disconnected = False
        self.task = None
        self._waiting = None
        self.scope = scope
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.body = bytearray()
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self._connection = connection
        # Set when something arrived that ``receive`` has not returned yet (an asyncio.Event's
        # job, without its futures when nothing waits).
        self._unread = False
        self._waiter: asyncio.Future[None] | None = None
        self._chunked: bool | None = None
        self._length_left = 0

    # -- what the connection tells it ----------------------------------------------------------

    def add_body(self, data: bytes) -> None:
        self.body += data
        # A client that sends its body without waiting for ``100 Continue`` needs none
        # (RFC 9110 section 10.1.1), and an answer before it reads on as for any request.
        self.waiting_for_100_continue = False
        if len(self.body) > HIGH_WATER_BYTES:
            self._connection.pause_reading()
        self.signal()

    def end_body(self) -> None:
        self.more_body = False
        self.signal()

    def lost(self) -> None:
        super().lost()  # the work awaited under ``until_disconnect`` is cancelled
        self.signal()

    def signal(self) -> None:
        self._unread = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the application's side ----------------------------------------------------------------

    async def run(self, app: App) -> None:
        """The application on this request; a failure before the answer began is a 500."""
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            logger.error("Exception in ASGI application", exc_info=exc)
            if not self.response_started:
                await self._send_500()
            else:
                self._connection.transport.close()
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
        else:
            if self.disconnected:
                return
            if not self.response_started:
                logger.error("ASGI callable returned without starting response.")
                await self._send_500()
            elif not self.response_complete:
                logger.error("ASGI callable returned without completing response.")
                self._connection.transport.close()

    def take_whole_body(self) -> bytes | None:
        """The whole request body, where it has all arrived and ``receive`` returned none of it;
        None where ``receive`` must be awaited for it (it is still arriving, ``100 Continue`` is
        not sent yet, or the answer or the connection has ended)."""
        if (
            self.more_body
            or not self._unread
            or self.waiting_for_100_continue
            or self.disconnected
            or self.response_complete
        ):
            return None
        self._unread = False
        body = bytes(self.body)
        self.body = bytearray()
        return body

    async def receive(self) -> Message:
        connection = self._connection
        if self.waiting_for_100_continue and not connection.transport.is_closing():
            connection.transport.write(_CONTINUE)
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            if connection.read_paused:
                connection.resume_reading()
            if not self._unread:
                self._waiter = connection.loop.create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
            self._unread = False
        if self.disconnected or self.response_complete:
            return _DISCONNECT
        message = {"type": "http.request", "body": bytes(self.body), "more_body": self.more_body}
        self.body = bytearray()
        return message

    async def send(self, message: Message) -> None:
        connection = self._connection
        if connection.write_paused and not self.disconnected:
            await connection.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{kind}'."
                )
            self._start(message["status"], message.get("headers", ()))
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(
                f"Unexpected ASGI message '{kind}' sent, after response already completed."
            )

    def write_whole(self, status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> bool:
        """Write the whole answer at once and complete it; False (nothing written) where
        ``send`` must take it: the answer has started, the client is gone, the socket's write
        buffer is full (``send`` waits for it to drain), the answer has no body by HTTP's rules
        (HEAD, 204, 304), it is chunked, or a header value would be refused.

        ``headers`` have lower-case names; a content-length among them is replaced by the body's
        own length, and ``connection: close`` closes the connection after the answer.
        """
        connection = self._connection
        if (
            self.response_started
            or self.disconnected
            or connection.write_paused
            or status in _NO_BODY_STATUSES
            or self.scope["method"] == "HEAD"
        ):
            return False
        if self.waiting_for_100_continue:
            self._answer_without_continue()
        content = [status_line(status)]
        asks_close = False
        for name, value in (*connection.server_state.default_headers, *headers):
            if name == b"content-length":
                continue
            if name == b"transfer-encoding" or _BAD_VALUE.search(value):
                return False  # ``send`` frames it, or refuses it as it would for any answer
            if name == b"connection" and b"close" in value.lower():
                asks_close = True
            content += (name, b": ", value, b"\r\n")
        content += (b"content-length: ", str(len(body)).encode(), b"\r\n")
        if asks_close:
            self.keep_alive = False
        elif not self.keep_alive:
            content.append(_CONNECTION_CLOSE)
        content += (b"\r\n", body)
        self.response_started = True
        connection.transport.write(b"".join(content))
        self._complete()
        return True

    # -- framing -------------------------------------------------------------------------------

    def _start(self, status: int, headers: Sequence[tuple[bytes, bytes]]) -> None:
        self.response_started = True
        if self.waiting_for_100_continue:
            self._answer_without_continue()
        content = [status_line(status)]
        has_close = False
        for name, value in (*self._connection.server_state.default_headers, *headers):
            if _NOT_TOKEN.search(name):
                raise RuntimeError("Invalid HTTP header name.")
            if _BAD_VALUE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            name = name.lower()
            if name == b"content-length" and self._chunked is None:
                self._length_left = int(value.decode())
                self._chunked = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self._length_left = 0
                self._chunked = True
            elif name == b"connection" and b"close" in (
                token.strip().lower() for token in value.split(b",")
            ):
                self.keep_alive = False
                has_close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not has_close:
            content.append(_CONNECTION_CLOSE)
        if (
            self._chunked is None
            and self.scope["method"] != "HEAD"
            and status not in _NO_BODY_STATUSES
        ):
            self._chunked = True  # neither a length nor an encoding given
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self._connection.transport.write(b"".join(content))

    def _answer_without_continue(self) -> None:
        """Answered before ``100 Continue`` was sent (a refusal, or an answer that needs no
        body): the client may now send its body or never send it, and what arrives next cannot
        tell the two apart, so the connection closes after this answer (RFC 9110 section
        10.1.1). Reading a body nobody asked for would only waste the upload."""
        self.waiting_for_100_continue = False
        if self.more_body:
            self.keep_alive = False

    def _body(self, body: bytes, more_body: bool) -> None:
        transport = self._connection.transport
        if self.scope["method"] == "HEAD":
            self._length_left = 0
        elif self._chunked:
            content = [b"%x\r\n" % len(body), body, b"\r\n"] if body else []
            if not more_body:
                content.append(b"0\r\n\r\n")
            transport.write(b"".join(content))
        else:
            if len(body) > self._length_left:
                raise RuntimeError("Response content longer than Content-Length")
            self._length_left -= len(body)
            transport.write(body)
        if not more_body:
            if self._length_left != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self._complete()

    def _complete(self) -> None:
        self.response_complete = True
        self.signal()
        if not self.keep_alive:
            self._connection.transport.close()
        self._connection.answered(self)

    async def _send_500(self) -> None:
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"%d" % len(_SERVER_ERROR)),
            (b"connection", b"close"),
        ]
        await self.send({"type": "http.response.start", "status": 500, "headers": headers})
        await self.send({"type": "http.response.body", "body": _SERVER_ERROR})
