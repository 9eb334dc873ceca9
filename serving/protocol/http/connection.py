"""The data plane's HTTP/1.1 connection: httptools parsing straight into ASGI, with client limits.

Every HTTP listener of the data plane (the serving process's, and each HTTP front-end process's)
runs this protocol under ``uvicorn.Server``, which keeps the listening, TLS, the date header and
the graceful shutdown. It replaces uvicorn's own httptools protocol and the subclass layers
that reached into its request cycle. Counted by ``python -m bench.instructions``, a request
costs about 38,000 fewer instructions: no ``asyncio.Event`` per request, no keep-alive timer set
and cancelled per request, no header checks on every ``send``, none of the layers' own calls.

What it does per connection, as uvicorn's did:
- requests are parsed by llhttp (httptools) and answered in order; a pipelined request waits,
  with reading paused, until the one before it is answered;
- ``Expect: 100-continue`` is answered when the application first reads the body; answered
  before that (a refusal), the client may never send its body, so the connection closes after
  the answer, unless the body came anyway;
- reading pauses while a body the application has not taken exceeds 64 KiB, and ``send`` waits
  while the socket's write buffer is full;
- an idle keep-alive connection is closed after ``keep_alive_s``; on shutdown an idle
  connection closes at once and a busy one after its answer;
- a request the parser refuses gets 400 and the connection closes.

And the limits uvicorn lacks (a slow or huge client otherwise holds a socket, a descriptor and a
place under the in-flight cap for as long as it likes):
- **headers**: a connection's request headers must arrive within ``header_timeout_s`` of the
  connection opening or the request beginning, or it gets 408 and is closed (slowloris);
- **bodies**: no more than ``body_timeout_s`` may pass between two reads of a body (nginx's
  ``client_body_timeout``): the limit is on silence, not on the whole body, and only the
  client's silence counts (while reading is paused or ``100 Continue`` is not sent yet the
  clock starts again);
- **header size**: a request line and headers above ``MAX_HEADER_BYTES`` get 431 and a close;
- **answers**: a client that takes none of its answer's bytes for ``send_timeout_s`` while the
  socket's write buffer is full has its connection reset (nginx's ``send_timeout``;
  ``write_stall``).

Every request's scope carries its ``Exchange``, which is also the request's ``DisconnectWatch``
(a lost connection tells it, so ``until_disconnect`` needs no task of its own) and what
``write_whole`` is called on.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import urllib.parse
from typing import Any

import httptools
import orjson

from serving.protocol.http.deadlines import Deadline, request_timeout_answer
from serving.protocol.http.disconnect import DISCONNECT_EXTENSION
from serving.protocol.http.exchange import Exchange, status_line
from serving.protocol.http.whole_answer import WHOLE_ANSWER_EXTENSION
from serving.protocol.write_stall import WriteStall

logger = logging.getLogger("serving.http")

# Request line and headers together, as nginx's large header buffers (4 x 8 KiB) and more.
MAX_HEADER_BYTES = 64 * 1024
_HEADERS_TIMEOUT = request_timeout_answer("request headers were not received in time")
_BODY_TIMEOUT = request_timeout_answer("request body was not received in time")
_INVALID = b"Invalid HTTP request received."
_ASGI = {"version": "3.0", "spec_version": "2.3"}


def _refusal(status: int, content_type: bytes, body: bytes) -> bytes:
    return b"%scontent-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (
        status_line(status), content_type, len(body), body
    )  # fmt: skip


_BAD_REQUEST = _refusal(400, b"text/plain; charset=utf-8", _INVALID)
_HEADERS_TOO_LARGE = _refusal(431, b"application/json", orjson.dumps(
    {"error": f"request headers exceed {MAX_HEADER_BYTES} bytes"}))  # fmt: skip


class _HeadersTooLarge(Exception):
    """Raised from a parser callback; httptools hands it back as a parser error."""


class DataPlaneConnection(asyncio.Protocol):
    """One client connection (see the module). uvicorn makes one per accepted socket."""

    header_timeout_s = 30.0
    body_timeout_s = 60.0
    send_timeout_s = 60.0

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: Any = None,
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.keep_alive_s: float = config.timeout_keep_alive
        self.server_state = server_state
        self.parser = httptools.HttpRequestParser(self)
        # NOTE: answers a request whose client half-closed after sending it, as uvicorn does.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.read_paused = False
        self.write_paused = False
        self._drained: asyncio.Future[None] | None = None
        # The latest request parsed (the one bodies belong to), and those not yet answered, in
        # order: the first is running, the rest are pipelined behind it.
        self._exchange: Exchange | None = None
        self._unanswered: collections.deque[Exchange] = collections.deque()
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._expect_continue = False
        self._headers_since_s: float | None = None  # None: not inside a request's headers
        self._last_read_s = 0.0
        self._in_body = False
        self._idle_since_s: float | None = None  # None: a request is being read or answered

    # -- the transport's callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.server_state.connections.add(self)
        sockname, peername = (
            transport.get_extra_info("sockname"),
            transport.get_extra_info("peername"),
        )
        self._server = tuple(sockname[:2]) if isinstance(sockname, tuple) else None
        self._client = tuple(peername[:2]) if isinstance(peername, tuple) else None
        self._scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self._header_deadline = Deadline(self.loop, self._header_deadline_fired)
        self._body_deadline = Deadline(self.loop, self._body_deadline_fired)
        self._idle_deadline = Deadline(self.loop, self._idle_deadline_fired)
        client = f"{self._client[0]}:{self._client[1]}" if self._client else "a client"
        self._write_stall = WriteStall(
            self.loop, transport, self.send_timeout_s, f"the HTTP connection of {client}"
        )
        self._headers_since_s = self.loop.time()
        self._header_deadline.arm(self.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        self._idle_since_s = None
        try:
            self.parser.feed_data(data)
        except _HeadersTooLarge:
            self._refuse(_HEADERS_TOO_LARGE)
        except httptools.HttpParserUpgrade:
            # NOTE: no protocol to upgrade to: the request is answered as plain HTTP, and the
            # connection closes after it, since the parser reads nothing more on it.
            exchange = self._exchange
            if exchange is not None:
                exchange.keep_alive = False
                if exchange.more_body:
                    exchange.end_body()
        except httptools.HttpParserError as exc:
            too_large = isinstance(exc.__context__, _HeadersTooLarge)
            self._refuse(_HEADERS_TOO_LARGE if too_large else _BAD_REQUEST)

    def eof_received(self) -> None:
        return None  # the transport closes itself; answers still in flight find it closing

    def connection_lost(self, exc: Exception | None) -> None:
        self.server_state.connections.discard(self)
        for deadline in (self._header_deadline, self._body_deadline, self._idle_deadline):
            deadline.disarm()
        self._write_stall.stop()
        while self._unanswered:
            self._unanswered.popleft().lost()
        self.resume_writing()  # NOTE: a ``send`` waiting on the buffer wakes and finds it gone
        if exc is None:
            self.transport.close()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._write_stall.pause()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._write_stall.resume()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # -- what an exchange asks of its connection -----------------------------------------------

    async def drain(self) -> None:
        if self.write_paused:
            if self._drained is None:
                self._drained = self.loop.create_future()
            await self._drained

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def answered(self, exchange: Exchange) -> None:
        """``exchange``'s answer is complete: start the next pipelined request, or wait idle."""
        if self._unanswered and self._unanswered[0] is exchange:
            self._unanswered.popleft()
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if self.read_paused:
            self.resume_reading()
        if self._unanswered:
            self._start(self._unanswered[0])
        else:
            self._idle_since_s = self.loop.time()
            if not self._idle_deadline.armed:
                self._idle_deadline.arm(self.keep_alive_s)

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: close when idle, else after the answer in progress."""
        exchange = self._exchange
        if exchange is None or exchange.response_complete:
            self.transport.close()
        else:
            exchange.keep_alive = False

    # -- the parser's callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._header_bytes = 0
        self._expect_continue = False
        self._headers_since_s = self.loop.time()
        if not self._header_deadline.armed:
            self._header_deadline.arm(self.header_timeout_s)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_bytes += len(url)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise _HeadersTooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        # NOTE: counted here rather than in a helper: this runs for every header of every request.
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise _HeadersTooLarge
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._headers_since_s = None  # NOTE: the timer runs on; it finds nothing to do
        parser = self.parser
        http_version = parser.get_http_version()
        url = httptools.parse_url(self._url)
        raw_path = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope: dict[str, Any] = {
            "type": "http", "asgi": _ASGI, "http_version": http_version,
            "method": parser.get_method().decode("ascii"), "scheme": self._scheme,
            "path": path, "raw_path": raw_path, "query_string": url.query or b"",
            "root_path": "", "headers": self._headers, "server": self._server,
            "client": self._client,
        }  # fmt: skip
        exchange = Exchange(
            scope,
            self,
            keep_alive=http_version != "1.0" and parser.should_keep_alive(),
            expect_100_continue=self._expect_continue,
        )
        scope["extensions"] = {DISCONNECT_EXTENSION: exchange, WHOLE_ANSWER_EXTENSION: exchange}
        self._exchange = exchange
        self._unanswered.append(exchange)
        self._last_read_s = self.loop.time()
        self._in_body = True
        if not self._body_deadline.armed:
            self._body_deadline.arm(self.body_timeout_s)
        if len(self._unanswered) == 1:
            self._start(exchange)
        else:
            self.pause_reading()  # pipelined: it waits for the answers before it

    def on_body(self, body: bytes) -> None:
        self._last_read_s = self.loop.time()  # NOTE: no timer per chunk: it is checked on firing
        exchange = self._exchange
        if exchange is not None and not exchange.response_complete:
            exchange.add_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        exchange = self._exchange
        if exchange is not None and not exchange.response_complete:
            exchange.end_body()

    # -- inside ----------------------------------------------------------------------------------

    def _start(self, exchange: Exchange) -> None:
        tasks = self.server_state.tasks
        task = self.loop.create_task(exchange.run(self.app))
        exchange.task = task
        task.add_done_callback(tasks.discard)
        tasks.add(task)

    def _refuse(self, answer: bytes) -> None:
        """Answer a request the connection cannot read on, then close."""
        if self.transport.is_closing():
            return
        if self._unanswered_started():
            self.transport.close()  # NOTE: an answer has begun; another would corrupt it
            return
        self.transport.write(answer)
        self.transport.close()

    def _unanswered_started(self) -> bool:
        return bool(self._unanswered) and self._unanswered[0].response_started

    def _header_deadline_fired(self) -> None:
        if self._headers_since_s is None:
            return  # between requests: the next one sets the timer again
        remaining_s = self._headers_since_s + self.header_timeout_s - self.loop.time()
        if remaining_s > 0:
            self._header_deadline.arm(remaining_s)
            return
        # NOTE: only between answers; a pipelined request behind a running one just closes.
        self._time_out(_HEADERS_TIMEOUT, answer=not self._unanswered)

    def _body_deadline_fired(self) -> None:
        if not self._in_body:
            return  # the body is complete: the next request's headers set the timer again
        exchange = self._exchange
        if self.read_paused or (exchange is not None and exchange.waiting_for_100_continue):
            self._last_read_s = self.loop.time()  # the silence is the server's own
        remaining_s = self._last_read_s + self.body_timeout_s - self.loop.time()
        if remaining_s > 0:
            self._body_deadline.arm(remaining_s)
            return
        # NOTE: an application that has begun its answer (it refused the request without
        # reading the body) has said what there was to say; the connection just closes.
        self._time_out(_BODY_TIMEOUT, answer=not self._unanswered_started())

    def _idle_deadline_fired(self) -> None:
        if self._idle_since_s is None:
            return  # busy: the next answer sets the timer again
        remaining_s = self._idle_since_s + self.keep_alive_s - self.loop.time()
        if remaining_s > 0:
            self._idle_deadline.arm(remaining_s)
        elif not self.transport.is_closing():
            self.transport.close()

    def _time_out(self, timeout_answer: bytes, *, answer: bool) -> None:
        """Close the connection, with ``timeout_answer`` first when ``answer``."""
        if self.transport.is_closing():
            return
        if answer:
            self.transport.write(timeout_answer)
        self.transport.close()


def data_plane_connection(
    header_timeout_s: float, body_timeout_s: float, send_timeout_s: float
) -> type[DataPlaneConnection]:
    """The protocol class for uvicorn's ``http=`` option, with this listener's limits."""
    limits = {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s,
              "send_timeout_s": send_timeout_s}  # fmt: skip
    return type("LimitedDataPlaneConnection", (DataPlaneConnection,), limits)
