"""The gRPC listener on h2corn (the default, ``--grpc-transport h2corn``): HTTP/2 in Rust,
each call an ASGI request run through ``calls.run_call``, on this process's loop.

Why: on the loop's own transport (``http2_server``) the HTTP/2 library's Python state machine
costs more per call than HTTP/1.1's whole server (docs/benchmarks.md, "the gRPC listener's own
cost"). h2corn parses frames, HPACK and flow control in native code and hands the loop one
request at a time, as uvicorn does for HTTP/1.1; what is left here is gRPC's own layer
(``http2_wire``) and the same handlers as the other transports.

What HTTP/2 limits remain h2corn's: streams per connection, header sizes, handshake and idle
timeouts, resets. A message larger than ``max_message_bytes`` ends its call RESOURCE_EXHAUSTED as
soon as its length prefix arrives, as on the other transports. TLS (``TlsFiles``) is h2corn's
too: TLS 1.2 and 1.3 with ALPN ``h2``, and with a client CA a client certificate is required.

A call whose client resets it or leaves is cancelled by h2corn (it cancels the call's task),
so a request still queued is dropped and never runs, as on the other transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving.protocol.grpc import http2_wire as wire
from serving.protocol.grpc.arriving import ArrivingMessages
from serving.protocol.grpc.calls import DECODE_FAILED, INTERNAL, Dispatcher, run_call
from serving.protocol.grpc.context import CallContext

if TYPE_CHECKING:
    from serving.core.request_bytes import RequestBytesBudget
    from serving.settings import ServingSettings

logger = logging.getLogger("serving.grpc")

MAX_CONCURRENT_STREAMS = 1024  # as on the loop's own listener
HANDSHAKE_TIMEOUT_S = 120.0  # grpc's own servers' handshake timeout
MAX_HEADER_LIST_BYTES = 16 << 10  # grpc's own default limit on request metadata
# h2corn gives a call's bytes back to the connection's receive window only once the call has read
# them, and by default both windows are 8 MiB: one ModelStreamInfer stream whose servicer had
# stopped taking requests (64 in flight to a slow model, or a client that reads no answers) took
# the connection's whole window, and no other call on that connection could send a byte. So a
# call may take half of it. Not a larger connection window: with 16 MiB, a front-end whose
# serving process was stopped closed its clients' connections once it ran again (11 of 57 runs
# beside four busy processes; 0 of 16 at 8 MiB), for a reason inside h2corn; docs/serving.md.
STREAM_WINDOW_BYTES = 4 << 20
CONNECTION_WINDOW_BYTES = 8 << 20  # h2corn's default, stated here beside the call's
# Request bytes the calls may hold at once while their messages arrive, as a multiple of the
# message limit: past it the call that would add more ends RESOURCE_EXHAUSTED. h2corn's flow
# control bounds what it buffers itself, but each call here reads its message whole before
# decoding it; without this, clients opening many streams, each with a message just under the
# limit that never completes, would hold all of it in this process's memory.
HELD_MESSAGES = 8
ANSWER_HEADERS = [list(pair) for pair in wire.ANSWER_HEADERS[1:]]  # ASGI sends :status itself


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """The server's PEM certificate chain and key; with ``client_ca``, clients must present a
    certificate that chains to it (``--grpc-use-ssl-mutual``)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    @classmethod
    def from_settings(cls, settings: ServingSettings) -> TlsFiles | None:
        if not settings.grpc_tls:
            return None
        assert settings.grpc_server_cert is not None and settings.grpc_server_key is not None
        client_ca = settings.grpc_root_cert if settings.grpc_use_ssl_mutual else None
        return cls(settings.grpc_server_cert, settings.grpc_server_key, client_ca)

    def options(self) -> dict[str, Any]:
        """h2corn ``Config`` options. A file that cannot be read raises its ``OSError`` here, as
        Python's ``ssl`` does for the other transports, not later from h2corn's start."""
        for path in (self.cert, self.key, self.client_ca):
            if path is not None:
                path.open("rb").close()
        return {
            "certfile": self.cert, "keyfile": self.key, "ca_certs": self.client_ca,
            "cert_reqs": "required" if self.client_ca is not None else "none",
        }  # fmt: skip


class H2cornGrpcServer:
    """Listens for gRPC clients with h2corn and serves every call on this process's loop."""

    def __init__(
        self,
        register: Callable[[Any], None],
        *,
        interceptors: Sequence[Any] = (),
        max_message_bytes: int,
        grace_s: float = 30.0,
        send_timeout_s: float = 60.0,
        tls: TlsFiles | None = None,
        read_gate: Callable[[], Awaitable[None]] | None = None,
        request_bytes: RequestBytesBudget | None = None,
    ) -> None:
        self._dispatcher = Dispatcher(register, interceptors)
        # Awaited before each read of a call's request bytes: a front-end's wait for the serving
        # process to catch up, so meanwhile the bytes stay with the client (HTTP/2 flow control).
        self.read_gate = read_gate
        self._max_message = max_message_bytes
        self._grace_s = grace_s  # h2corn's config is fixed once it serves: the stop's grace
        self._send_timeout_s = send_timeout_s
        self.held = 0  # request bytes the running calls hold (``_AsgiCall.held``, summed)
        self.hold_limit = HELD_MESSAGES * max_message_bytes
        # The replica's request-bytes budget, for unary calls' messages while they arrive.
        self.arriving = ArrivingMessages.of(request_bytes)
        self._tls = tls
        self._server: Any = None
        self._serving: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> int:
        """Listen on ``host:port`` (port 0: a free one); returns the bound port."""
        from h2corn import Config, Server  # only this transport needs it

        bind = f"[{host}]:{port}" if ":" in host else f"{host or '0.0.0.0'}:{port}"
        config = Config(
            bind=(bind,), grpc=True, http1=False, lifespan="off", access_log=False,
            reuse_port=reuse_port, backlog=2048, runtime_threads=1,
            max_concurrent_streams=MAX_CONCURRENT_STREAMS,
            h2_initial_stream_window_size=STREAM_WINDOW_BYTES,
            h2_initial_connection_window_size=CONNECTION_WINDOW_BYTES,
            h2_max_header_list_size=MAX_HEADER_LIST_BYTES, timeout_handshake=HANDSHAKE_TIMEOUT_S,
            timeout_graceful_shutdown=self._grace_s, server_header="off", date_header=False,
            # A client that takes none of an answer for this long: its stream is reset (the
            # answer's bytes wait behind its HTTP/2 window) or its connection closed (they wait
            # for its socket), as on the other listeners (``write_stall``).
            h2_timeout_response_stall=self._send_timeout_s,
            h2_timeout_write=self._send_timeout_s,
            **(self._tls.options() if self._tls is not None else {}),
        )  # fmt: skip
        self._server = Server(self, config)
        self._serving = asyncio.ensure_future(self._server.serve())
        waiting = asyncio.ensure_future(self._server.wait_started())
        await asyncio.wait((waiting, self._serving), return_when=asyncio.FIRST_COMPLETED)
        if self._serving.done():  # serve() ended: the start failed; say why
            waiting.cancel()
            self._serving.result()
            raise RuntimeError("the gRPC listener stopped before it started")
        waiting.result()
        return int(self._server.addresses[0].rsplit(":", 1)[1])

    async def stop(self, grace_s: float) -> None:
        """No new connections; the calls running get the grace given at construction (h2corn
        takes it then), and ``grace_s`` bounds the wait here too."""
        if self._server is None or self._serving is None:
            return
        self._server.shutdown()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.shield(self._serving), timeout=min(grace_s, self._grace_s) + 5.0
            )

    # --- the ASGI application ----------------------------------------------------------------

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = scope["headers"]
        found = wire.read_headers(headers)
        found[b":method"] = scope["method"].encode("latin-1")
        refusal = wire.is_grpc(found)
        if refusal is not None:  # not a gRPC request at all: an HTTP answer
            await _refuse_http(send, int(refusal))
            return
        call = _AsgiCall(self, receive, send)
        try:
            timeout_s, call.wbits, meta = wire.call_settings(found, headers)
        except wire.WireError as exc:
            call.status(exc.code, exc.message)
            await call.finish()
            return
        call.context = CallContext(meta, _peer(scope.get("client")), timeout_s)
        task = timer = None
        if timeout_s is not None:  # the call's own task, cancelled when its deadline passes
            task = asyncio.current_task()
            timer = asyncio.get_running_loop().call_later(timeout_s, call.expire, task)
        try:
            await run_call(
                self._dispatcher, scope["path"], call.context, call, call,
                where="in a gRPC call",
            )  # fmt: skip
        except asyncio.CancelledError:
            if not call.expired:
                raise
        finally:
            call.release()
            if timer is not None:
                timer.cancel()
        if call.expired and task is not None:
            task.uncancel()
        await call.finish()


class _AsgiCall:
    """One call: its request messages from ``receive``, its answer to ``send`` (``CallRequests``
    and ``CallSink``). A unary answer is held until the servicer returns, then sent whole."""

    __slots__ = ("_server", "_receive", "_send", "_limit", "wbits", "context", "expired",
                 "held", "_messages", "_partial", "_ended", "_started", "_answer",
                 "_trailers", "_unary", "_share")  # fmt: skip

    def __init__(self, server: H2cornGrpcServer, receive: Any, send: Any) -> None:
        self._server, self._receive, self._send = server, receive, send
        self._limit = server._max_message
        self.held = 0  # bytes of a message still arriving (counted in the server's ``held``)
        self.wbits: int | None = None
        self.context: CallContext | None = None
        self.expired = False
        self._messages: list[bytes] = []
        self._partial = bytearray()  # the start of a message still arriving
        self._ended = False  # the client half-closed (or went away)
        self._started = False  # the answer's headers went out
        self._answer = b""  # a unary answer, framed, waiting for ``finish``
        self._trailers: list[Any] | None = None  # the status, once decided
        self._unary = False  # its servicer reads one message (``single``)
        self._share = 0  # the budget's bytes taken for the message arriving (``arriving``)

    # --- CallRequests --------------------------------------------------------------------------

    async def single(self) -> bytes | None:
        self._unary = True
        while not self._ended and len(self._messages) < 2 and self._trailers is None:
            await self._read()
        if self._trailers is not None:
            return None
        if len(self._messages) != 1:
            count = "no" if not self._messages else "more than one"
            self.status(INTERNAL, f"A unary call received {count} request message")
            return None
        return self._messages.pop()

    async def stream(self) -> AsyncIterator[bytes]:
        while True:
            if self._messages:
                yield self._messages.pop(0)
            elif self._ended or self._trailers is not None:
                return
            else:
                await self._read()

    async def _read(self) -> None:
        gate = self._server.read_gate
        if gate is not None:
            await gate()
        event = await self._receive()
        if event["type"] != "http.request":  # http.disconnect: nobody is left to answer
            self._ended = True
            raise asyncio.CancelledError
        if not event.get("more_body", False):
            self._ended = True
        data = event.get("body", b"")
        if data:
            try:
                self._take(data)
            except wire.WireError as exc:
                self.status(exc.code, exc.message)
        if self._ended and self._partial and self._trailers is None:
            self.status(INTERNAL, "Incomplete gRPC message at the end of the stream")

    def _take(self, data: bytes) -> None:
        """Split arriving body bytes into whole messages; a message's start stays in
        ``_partial`` (a bytearray, so a large message arriving in pieces is not copied anew
        with each)."""
        if self._partial:
            self._partial += data
            buffer: bytes | bytearray = self._partial
        else:
            buffer = data
        pos = wire.take_messages(buffer, self._limit, self.wbits, self._messages)
        if pos == len(buffer):
            self._partial = bytearray()
        elif buffer is self._partial:
            del self._partial[:pos]
        else:
            self._partial = bytearray(buffer[pos:])
        self._hold(len(self._partial))
        if self._unary and (self._share or self._partial):
            self._count_arriving()

    def _count_arriving(self) -> None:
        arriving = self._server.arriving
        if arriving is None:
            return
        share, self._share = self._share, 0
        try:
            self._share = arriving.recount(share, self._partial)
        except wire.WireError:
            self.release()
            raise

    def _hold(self, size: int) -> None:
        server = self._server
        server.held += size - self.held
        self.held = size
        if size and server.held > server.hold_limit:
            self.release()
            peer = self.context.peer() if self.context else "unknown"
            logger.warning("gRPC call from %s refused: the calls held %d request bytes at once",
                           peer, server.hold_limit)  # fmt: skip
            raise wire.WireError(
                wire.RESOURCE_EXHAUSTED, "The server holds too many request bytes; try again later"
            )

    def release(self) -> None:
        """The call is over (or refused): what it held of a message is dropped."""
        self._partial = bytearray()
        self._hold(0)
        if self._share:
            self._count_arriving()

    # --- CallSink ----------------------------------------------------------------------------

    def answer(self, payload: bytes) -> None:
        if self._trailers is None:
            self._answer = wire.frame_message(payload)
            self._trailers = list(wire.OK_TRAILERS)

    async def message(self, payload: bytes) -> None:
        if self._trailers is not None:
            raise asyncio.CancelledError  # the call already ended: its servicer stops here
        try:
            await self._start()
            await self._send(
                {"type": "http.response.body", "body": wire.frame_message(payload),
                 "more_body": True}
            )  # fmt: skip
        except OSError:  # the client has gone: its servicer stops here, no incident
            self._trailers = []
            raise asyncio.CancelledError from None

    def status(self, code: int, details: str, trailing: Sequence[Any] = ()) -> None:
        if self._trailers is None:
            self._trailers = wire.trailers(code, details, trailing)

    def refuse(self) -> None:
        self.status(INTERNAL, DECODE_FAILED)
        if self.context is not None:
            self.context.cancel()

    # --- the answer --------------------------------------------------------------------------

    def expire(self, task: asyncio.Task[Any] | None) -> None:
        """The client's deadline passed: it gets DEADLINE_EXCEEDED and the work stops."""
        self.status(wire.DEADLINE_EXCEEDED, "Deadline Exceeded")
        self.expired = True
        if self.context is not None:
            self.context.cancel()
        if task is not None:
            task.cancel()

    async def _start(self) -> None:
        if not self._started:
            self._started = True
            await self._send({"type": "http.response.start", "status": 200,
                              "headers": ANSWER_HEADERS, "trailers": True})  # fmt: skip

    async def finish(self) -> None:
        """Send what is left of the answer and its status (CANCELLED if none was decided)."""
        trailers = self._trailers
        if trailers is None:
            trailers = wire.trailers(wire.CANCELLED, "Cancelled", ())
        with contextlib.suppress(Exception):  # the client has gone: nothing can reach it
            await self._start()
            await self._send({"type": "http.response.body", "body": self._answer})
            await self._send({"type": "http.response.trailers", "headers": trailers})


async def _refuse_http(send: Any, status: int) -> None:
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _peer(client: Any) -> str:
    """grpc's peer string: ``ipv4:HOST:PORT``, ``ipv6:[HOST]:PORT``."""
    if isinstance(client, (tuple, list)) and len(client) >= 2:
        host, port = client[0], client[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
    return "unknown"
