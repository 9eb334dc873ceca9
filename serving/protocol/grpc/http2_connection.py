"""One HTTP/2 connection of the gRPC listener: the ``jh2`` library's protocol state machine on an
asyncio transport, each stream a gRPC call run through ``calls.run_call``.

``jh2`` is ``h2``'s maintained fork, the same API with its HPACK compiled: a call's HTTP/2 work
costs about a third less CPU than on ``h2`` (docs/benchmarks.md, the cost run of 2026-12-04).

Why not grpc.aio here: grpc.aio hands each call over from grpcio's completion-queue thread, one
accepted call per loop turn, so under load requests wait inside grpcio and the batcher finds one
or two (docs/benchmarks.md). On the loop's own transport every call whose frames arrived in one
read starts in the same turn, as over HTTP/1.1, and the batcher sees them together.

A ``_Call`` is at once the call's request source and its answer's sink (``CallRequests``,
``CallSink``): one object per call. Flow control both ways is HTTP/2's: request data is
acknowledged as it arrives until a stream holds ``STREAM_WINDOW`` messages its servicer has not
taken, or ``STREAM_QUEUE_BYTES`` of them (then the client waits); an answer larger than the
client's window waits in the call's outbox, and a streaming servicer waits while its outbox holds
more than ``OUTBOX_LIMIT`` bytes. What waits in an outbox counts in the replica's request-bytes
budget until it has gone (``answers``): a unary answer is the servicer's no more once returned,
so without it clients that read nothing could hold answers of any size outside the budget. A
client that takes none of what waits for ``send_timeout_s`` has that stream reset (its outbox)
or its connection (the socket's write buffer, ``write_stall``), as h2corn does.
Writes are coalesced into one per loop turn.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import jh2.events as events
from jh2.config import H2Configuration
from jh2.connection import H2Connection
from jh2.errors import ErrorCodes
from jh2.exceptions import H2Error, ProtocolError
from jh2.hyperframe.frame import GoAwayFrame
from jh2.settings import SettingCodes, Settings

from serving.core.request_bytes import RequestBytesBudget
from serving.core.token_bucket import TokenBucket
from serving.protocol.grpc import http2_wire as wire
from serving.protocol.grpc.arriving import ArrivingMessages
from serving.protocol.grpc.calls import DECODE_FAILED, INTERNAL, Dispatcher, run_call
from serving.protocol.grpc.context import CallContext
from serving.protocol.http.deadlines import Deadline
from serving.protocol.write_stall import WriteStall

logger = logging.getLogger("serving.grpc")

STREAM_WINDOW = 64  # request messages a stream may hold that its servicer has not taken
# The bytes of those messages, at most (or one message of the limit, if that is less). Without a
# byte bound a stream of large messages whose servicer is behind (a streaming client that does
# not read its answers, or a slow model) held STREAM_WINDOW of them, past the connection's bound
# below, and a client that kept to HTTP/2's flow control had its connection ended, not held back.
STREAM_QUEUE_BYTES = 1 << 22
OUTBOX_LIMIT = 1 << 20  # answer bytes a streaming servicer may have waiting for the client
INITIAL_WINDOW = 1 << 22  # per stream: a large tensor arrives without waiting on window updates
CONNECTION_WINDOW = 1 << 24
MAX_CONCURRENT_STREAMS = 1024
MAX_HEADER_LIST_BYTES = 16 << 10  # grpc's own default limit on request metadata
# Request bytes one connection may hold (messages still arriving, and whole ones no servicer has
# taken), as a multiple of the message limit: past it the call whose bytes would add more ends
# RESOURCE_EXHAUSTED and its bytes are freed. Without it one client could open a thousand
# streams, each with a message just under the limit that never completes, and hold all of it in
# memory before any check runs. Only that call ends, not the connection: a client that keeps to
# flow control can pass the bound too (a stream to a busy model holds its queue and what is left
# of the window it was given: 2.8-4.8 MiB of 12 KB requests at a 1 MiB limit, 3.4 measured, so
# the second or third passes 8 MiB), and its other calls must go on.
HELD_MESSAGES_PER_CONNECTION = 8
# The same multiple for all of a listener's connections together, with the same answer (as on
# h2corn). Without it, many connections, each under its own bound, could hold it times their
# number.
HELD_MESSAGES = 8

# The client's stream resets one connection may make: a token bucket with nghttp2's defaults
# (the HTTP/2 library under node and Apache httpd). Each reset of a call still running costs its
# HEADERS' work and a task for nothing, so a client that opens and resets streams without end
# (HTTP/2 "rapid reset", CVE-2023-44487) would never meet MAX_CONCURRENT_STREAMS; past the bucket
# the connection ends ENHANCE_YOUR_CALM. Resets of calls already answered are not counted.
RESET_BURST, RESET_RATE_PER_S = 1000, 33.0
# A connection must send HTTP/2's preface and its SETTINGS within this, as grpc's own servers
# require (their handshake timeout, 120 s by default): a stranger's silent connections would
# otherwise each hold a socket for ever.
HANDSHAKE_TIMEOUT_S = 120.0

# The library's per-header checks of request headers cost about a tenth of a call's CPU (profiled
# on h2, whose checks jh2 keeps). They guard servers that forward headers into HTTP/1.1, where a
# bad character can split a request; this listener forwards nothing: a header is metadata (a str
# or bytes value a servicer reads) or ignored, and HTTP/2's framing itself is still checked.
PROTOCOL_CONFIG = H2Configuration(
    client_side=False,
    header_encoding=None,  # names and values stay bytes: no decode of headers nobody reads
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
    validate_outbound_headers=False,  # ours are fixed and valid
    normalize_outbound_headers=False,
)


class HeldBytes:
    """Request bytes all of one listener's calls hold, and the most they may (``HELD_MESSAGES``
    messages of the limit)."""

    __slots__ = ("held", "limit")

    def __init__(self, max_message_bytes: int) -> None:
        self.held = 0
        self.limit = HELD_MESSAGES * max_message_bytes


class GrpcHttp2Connection(asyncio.Protocol):
    """One client connection: its streams are calls; ``begin_close`` is the graceful end."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        max_message_bytes: int,
        send_timeout_s: float = 60.0,
        on_open: Callable[[GrpcHttp2Connection], None],
        on_close: Callable[[GrpcHttp2Connection], None],
        listener_held: HeldBytes,
        arriving: ArrivingMessages | None = None,
        answers: RequestBytesBudget | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._max_message = max_message_bytes
        self._hold_limit = HELD_MESSAGES_PER_CONNECTION * max_message_bytes
        self.queue_bytes = min(STREAM_QUEUE_BYTES, max_message_bytes)  # see STREAM_QUEUE_BYTES
        self.held = 0  # request bytes this connection's calls hold (``_Call.held``, summed)
        self.listener_held = listener_held  # what all the listener's connections hold
        self.arriving = arriving  # the request-bytes budget, for unary calls' arriving messages
        self.answers = answers  # the same budget, for answer bytes waiting in calls' outboxes
        self.send_timeout_s = send_timeout_s
        self._write_stall: WriteStall | None = None  # the socket's buffer, once connected
        self._on_open, self._on_close = on_open, on_close
        self._h2 = H2Connection(config=PROTOCOL_CONFIG)
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._outbox_watch = Deadline(self._loop, self._check_outboxes)  # while outboxes wait
        self._calls: dict[int, _Call] = {}
        self._running = 0  # calls whose task has not ended
        self._flush_due = False
        self._paused = False
        self._reads_held = False  # by the listener (``hold_reads``)
        self._refuse_after: int | None = None  # the last stream served once GOAWAY went out
        self._idle = asyncio.Event()
        self._idle.set()
        self._resets = TokenBucket(RESET_RATE_PER_S, burst=RESET_BURST)
        self._handshake: asyncio.TimerHandle | None = None  # pending until the client's SETTINGS
        self.peer = ""

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self.peer = _peer(transport.get_extra_info("peername"))
        self._write_stall = WriteStall(
            self._loop, transport, self.send_timeout_s, f"the gRPC connection of {self.peer}"
        )
        h2 = self._h2
        h2.local_settings = Settings(client=False, initial_values={
            SettingCodes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS,
            SettingCodes.INITIAL_WINDOW_SIZE: INITIAL_WINDOW,
            SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_BYTES,
        })  # fmt: skip
        # jh2 applies the header limit only once the client acknowledges the settings; a client
        # that sends its first call at once would get the library's 64 KiB until then.
        h2.decoder.max_header_list_size = MAX_HEADER_LIST_BYTES
        h2.initiate_connection()
        h2.increment_flow_control_window(CONNECTION_WINDOW - h2.inbound_flow_control_window)
        self._handshake = self._loop.call_later(HANDSHAKE_TIMEOUT_S, self._handshake_expired)
        self._on_open(self)
        self._flush()

    def _handshake_expired(self) -> None:
        logger.debug("gRPC connection from %s closed: no HTTP/2 preface in time", self.peer)
        self._handshake = None
        self._close_transport()

    def data_received(self, data: bytes) -> None:
        try:
            received = self._h2.receive_data(data)
        except ProtocolError as exc:  # jh2 has queued its GOAWAY: send it and end
            logger.debug("gRPC connection from %s broke HTTP/2: %s", self.peer, exc)
            self._flush()
            self._close_transport()
            return
        for event in received:
            if self._transport is None or self._transport.is_closing():
                break  # ended by one of these events (a limit): the rest is not served
            if isinstance(event, events.DataReceived):
                self._on_data(event)
            elif isinstance(event, events.RequestReceived):
                self._on_request(event)
            elif isinstance(event, events.StreamEnded):
                self._on_end(event.stream_id)
            elif isinstance(event, events.StreamReset):
                self._on_reset(event.stream_id)
            elif isinstance(event, events.WindowUpdated):
                self._on_window(event.stream_id)
            elif isinstance(event, events.RemoteSettingsChanged):
                if self._handshake is not None:  # the preface and SETTINGS are in
                    self._handshake.cancel()
                    self._handshake = None
                self._on_window(0)  # a new initial window resizes every stream's
            elif isinstance(event, events.ConnectionTerminated):
                # The client's GOAWAY. HTTP/2 would let its open calls still be answered, but
                # jh2 sends nothing more on a connection past one: they end here, cancelled.
                self._close_transport()
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._handshake is not None:
            self._handshake.cancel()
        if self._write_stall is not None:
            self._write_stall.stop()
        self._outbox_watch.disarm()
        for call in list(self._calls.values()):
            call.abandon()
        self._calls.clear()
        self._on_close(self)
        self._update_idle()

    def pause_writing(self) -> None:
        """The socket takes no more: nothing more is read from this client until it does.

        Without this a client that sends PINGs or SETTINGS and never reads would have their
        acknowledgements (and any answers) pile up in the transport without bound; reading on
        would also start calls whose answers have nowhere to go."""
        self._paused = True
        self._read_or_not()
        if self._write_stall is not None:
            self._write_stall.pause()

    def resume_writing(self) -> None:
        self._paused = False
        if self._write_stall is not None:
            self._write_stall.resume()
        self._read_or_not()
        for call in self._calls.values():
            call.wake_writer()

    def hold_reads(self, held: bool) -> None:
        """Read nothing more from this client while ``held`` (a front-end whose serving process
        is behind): its bytes wait in HTTP/2's and TCP's flow control."""
        self._reads_held = held
        self._read_or_not()

    def _read_or_not(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            if self._paused or self._reads_held:
                transport.pause_reading()
            else:
                transport.resume_reading()

    # --- the server's controls -------------------------------------------------------------

    def begin_close(self) -> None:
        """GOAWAY: the streams already open are served, later ones refused (REFUSED_STREAM, which
        a client retries elsewhere); the connection closes once its calls end.

        The GOAWAY is written as a frame of its own: jh2's ``close_connection`` would also stop
        the open streams' own frames."""
        if self._refuse_after is not None or self._transport is None:
            return
        self._refuse_after = self._h2.highest_inbound_stream_id
        self._flush()
        goaway = GoAwayFrame(0, last_stream_id=self._refuse_after, error_code=0)
        self._transport.write(goaway.serialize())
        self._close_when_idle()

    def abort(self) -> None:
        """End now: what is still running is cancelled."""
        self._close_transport()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    # --- requests ----------------------------------------------------------------------------

    def _on_request(self, event: events.RequestReceived) -> None:
        sid = event.stream_id
        if self._refuse_after is not None and sid > self._refuse_after:
            self._reset(sid, ErrorCodes.REFUSED_STREAM)
            return
        found = wire.read_headers(event.headers)
        refusal = wire.is_grpc(found)
        if refusal is not None:  # not a gRPC request at all: an HTTP answer
            self._refuse_http(sid, refusal)
            return
        call = _Call(self, sid)
        self._calls[sid] = call
        try:
            timeout_s, call.wbits, meta = wire.call_settings(found, event.headers)
        except wire.WireError as exc:
            call.status(exc.code, exc.message)
            return
        call.context = CallContext(meta, self.peer, timeout_s)
        method = found.get(b":path", b"").decode("latin-1")
        self._running += 1
        self._idle.clear()
        call.task = task = self._loop.create_task(self._run(call, method))
        # NOTE: the bookkeeping hangs on the task's end, not on a ``finally`` in ``_run``: a reset
        # read with its call's headers cancels the task before its first step, and such a task
        # never enters its coroutine.
        task.add_done_callback(lambda _: self._call_ended(call))
        if timeout_s is not None:
            call.timer = self._loop.call_later(timeout_s, call.expire)

    def _on_data(self, event: events.DataReceived) -> None:
        call = self._calls.get(event.stream_id)
        if call is None or call.done:  # answered already: the rest is read and dropped
            self._ack(event.stream_id, event.flow_controlled_length)
            return
        try:
            call.take(event.data)
        except wire.WireError as exc:
            call.status(exc.code, exc.message)
            call.stop_work()
            self._ack(event.stream_id, event.flow_controlled_length)
            return
        if self.held > self._hold_limit:
            self._refuse_holding(call, event, "its connection's calls", self.held)
            return
        listener = self.listener_held
        if listener.held > listener.limit:
            self._refuse_holding(call, event, "the calls", listener.held)
            return
        if call.has_room:
            self._ack(event.stream_id, event.flow_controlled_length + call.unacked)
            call.unacked = 0
        else:  # the servicer is behind: the client waits until it catches up
            call.unacked += event.flow_controlled_length

    def _refuse_holding(
        self, call: _Call, event: events.DataReceived, holders: str, held: int
    ) -> None:
        """``call``'s bytes took ``holders`` past their bound: it alone ends RESOURCE_EXHAUSTED and
        what it holds is freed (the bound holds again); the connection's other calls go on."""
        logger.warning("gRPC call from %s refused: %s held %d request bytes at once",
                       self.peer, holders, held)  # fmt: skip
        call.status(wire.RESOURCE_EXHAUSTED,
                    "The server holds too many request bytes; try again later")  # fmt: skip
        call.release()
        call.stop_work()
        self._ack(event.stream_id, event.flow_controlled_length + call.unacked)
        call.unacked = 0

    def _on_end(self, sid: int) -> None:
        call = self._calls.get(sid)
        if call is not None:
            call.ended = True
            if call.partial:
                call.status(INTERNAL, "Incomplete gRPC message at the end of the stream")
                call.stop_work()
            call.wake_reader()

    def _on_reset(self, sid: int) -> None:
        call = self._calls.pop(sid, None)
        if call is not None:
            call.abandon()
            if not self._resets.take():
                logger.warning("gRPC connection from %s ended: it reset running calls faster "
                               "than %d at once and %g a second", self.peer, RESET_BURST,
                               RESET_RATE_PER_S)  # fmt: skip
                self._end_now(ErrorCodes.ENHANCE_YOUR_CALM)
                return
        self._update_idle()

    def _on_window(self, sid: int) -> None:
        if sid:
            call = self._calls.get(sid)
            if call is not None:
                call.pump()
            return
        for call in list(self._calls.values()):
            call.pump()

    async def _run(self, call: _Call, method: str) -> None:
        assert call.context is not None
        await run_call(self._dispatcher, method, call.context, call, call, where="in a gRPC call")

    def _call_ended(self, call: _Call) -> None:
        self._running -= 1
        if call.timer is not None:
            call.timer.cancel()
        if not call.done and call.stream_id in self._calls:  # cancelled without an answer
            call.status(wire.CANCELLED, "Cancelled")
        self.flush_soon()
        self._update_idle()

    # --- writing -----------------------------------------------------------------------------

    def flush_soon(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        data = self._h2.data_to_send()
        if data and self._transport is not None:
            self._transport.write(data)

    def _ack(self, sid: int, length: int) -> None:
        if length:  # jh2 gives a closed stream's bytes back to the connection's window itself
            with contextlib.suppress(H2Error):
                self._h2.acknowledge_received_data(length, sid)

    def _reset(self, sid: int, code: ErrorCodes) -> None:
        with contextlib.suppress(H2Error):
            self._h2.reset_stream(sid, code)
        self.flush_soon()

    def _refuse_http(self, sid: int, status: bytes) -> None:
        with contextlib.suppress(H2Error):
            self._h2.send_headers(sid, ((b":status", status),), end_stream=True)
        self.flush_soon()

    def ended(self, call: _Call) -> None:
        """``call``'s answer has gone out whole."""
        if self._calls.get(call.stream_id) is call:
            del self._calls[call.stream_id]
        call.release()
        if not call.ended:  # the client is still sending: tell it to stop (RFC 9113 8.1)
            self._reset(call.stream_id, ErrorCodes.NO_ERROR)
        self._update_idle()

    def watch_outbox(self) -> None:
        """A call's outbox began to wait for its client's window."""
        if not self._outbox_watch.armed and self._transport is not None:
            self._outbox_watch.arm(self.send_timeout_s)

    def _check_outboxes(self) -> None:
        """Reset each stream whose client has given its outbox no window for the timeout; one
        timer for all of them, set again for the next one due."""
        now, next_due = self._loop.time(), None
        for call in list(self._calls.values()):
            since = call.outbox_since
            if since is None:
                continue
            due = since + self.send_timeout_s
            if due > now:
                next_due = due if next_due is None else min(next_due, due)
                continue
            logger.warning(
                "gRPC stream %d of %s reset: its client took none of its answer for %g s "
                "(--send-timeout-secs), %d bytes waiting",
                call.stream_id, self.peer, self.send_timeout_s, call.outbox_bytes,
            )  # fmt: skip
            del self._calls[call.stream_id]
            call.abandon()
            self._reset(call.stream_id, ErrorCodes.CANCEL)
        if next_due is not None:
            self._outbox_watch.arm(next_due - now)
        self._update_idle()

    def _update_idle(self) -> None:
        if not self._calls and not self._running:
            self._idle.set()
            if self._refuse_after is not None:
                self._close_when_idle()

    def _close_when_idle(self) -> None:
        if self._calls or self._running or self._transport is None:
            return
        with contextlib.suppress(H2Error):
            self._h2.close_connection(last_stream_id=self._refuse_after or 0)
        self._flush()
        self._close_transport()

    def _end_now(self, code: ErrorCodes) -> None:
        with contextlib.suppress(H2Error):
            self._h2.close_connection(error_code=code)
        self._flush()
        self._close_transport()
        # Its calls' bytes leave the listener's count now, not once the transport reports the
        # connection lost (a later loop turn): until then they refused other clients' calls.
        for call in self._calls.values():
            call.release()

    def _close_transport(self) -> None:
        if self._transport is not None:
            self._transport.close()

    @property
    def writable(self) -> bool:
        return not self._paused


class _Call:
    """One stream: its request messages in, its answer out (``CallRequests`` and ``CallSink``)."""

    __slots__ = ("_connection", "_h2", "stream_id", "context", "task", "timer", "wbits",
                 "partial", "messages", "queued", "held", "ended", "unacked", "done",
                 "unary", "share", "_waiter", "_writer", "_started", "_outbox",
                 "_trailers", "_outbox_share", "outbox_since")  # fmt: skip

    def __init__(self, connection: GrpcHttp2Connection, stream_id: int) -> None:
        self._connection = connection
        self._h2 = connection._h2
        self.stream_id = stream_id
        self.context: CallContext | None = None
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.wbits: int | None = None
        self.partial: bytearray | None = None  # the start of a message still arriving
        self.messages: collections.deque[bytes] = collections.deque()
        self.queued = 0  # bytes in ``messages``
        self.held = 0  # bytes in ``partial`` and ``messages`` (summed in the connection's ``held``)
        self.ended = False  # the client half-closed
        self.unacked = 0  # request bytes not yet given back to the client's window
        self.done = False  # the status is decided (sent, or waiting in the outbox)
        self.unary = False  # its servicer reads one message (``single``)
        self.share = 0  # the budget's bytes taken for the message arriving (``arriving``)
        self._waiter: asyncio.Future[None] | None = None  # the servicer, waiting for a request
        self._writer: asyncio.Future[None] | None = None  # the servicer, waiting to send
        self._started = False  # the answer's headers went out
        self._outbox: bytearray | None = None  # answer bytes waiting for the client's window
        self._trailers: Sequence[Any] | None = None  # to send once the outbox is empty
        self._outbox_share = 0  # the budget's bytes held for the outbox (``_count_outbox``)
        # While the outbox waits: when the client's window last let some of it go.
        self.outbox_since: float | None = None

    # --- request messages in (from the connection) -------------------------------------------

    def take(self, data: bytes) -> None:
        """Split arriving DATA into whole messages; a message's start stays in ``partial``."""
        if self.partial:
            self.partial += data
            buffer: bytes | bytearray = self.partial
        else:
            buffer = data
        size, before = len(buffer), len(self.messages)
        pos = wire.take_messages(buffer, self._connection._max_message, self.wbits, self.messages)
        for index in range(before, len(self.messages)):
            self.queued += len(self.messages[index])
        if pos == size:
            self.partial = None
        elif buffer is self.partial:
            del self.partial[:pos]
        else:
            self.partial = bytearray(buffer[pos:])
        self._count_held()
        if self.unary and (self.share or self.partial):
            self._count_arriving()
        if self.messages:
            self.wake_reader()

    def _count_arriving(self) -> None:
        arriving = self._connection.arriving
        if arriving is None:
            return
        share, self.share = self.share, 0
        try:
            self.share = arriving.recount(share, self.partial)
        except wire.WireError:
            self.release()
            raise

    def _count_held(self) -> None:
        held = self.queued + (len(self.partial) if self.partial else 0)
        connection = self._connection
        connection.held += held - self.held
        connection.listener_held.held += held - self.held
        self.held = held

    def release(self) -> None:
        """The call is over: what it still holds of its requests is dropped."""
        self.messages.clear()
        self.partial = None
        self.queued = 0
        self._count_held()
        if self.share:
            self._count_arriving()

    @property
    def has_room(self) -> bool:
        """Whether more of the client's messages may come: a full queue is acknowledged once its
        servicer takes one (``_pop``), so a stream that waits always has a message to take."""
        return len(self.messages) < STREAM_WINDOW and self.queued < self._connection.queue_bytes

    def wake_reader(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- CallRequests --------------------------------------------------------------------------

    async def single(self) -> bytes | None:
        self.unary = True
        if self.partial:  # its start came before the servicer asked for it
            try:
                self._count_arriving()
            except wire.WireError as exc:
                self.status(exc.code, exc.message)
                return None
        while not self.ended and len(self.messages) < 2:
            await self._wait_for_request()
        if len(self.messages) != 1:
            count = "no" if not self.messages else "more than one"
            self.status(INTERNAL, f"A unary call received {count} request message")
            return None
        return self._pop()

    async def stream(self) -> AsyncIterator[bytes]:
        while True:
            if self.messages:
                yield self._pop()
            elif self.ended or self.done:
                return
            else:
                await self._wait_for_request()

    def _pop(self) -> bytes:
        message = self.messages.popleft()
        self.queued -= len(message)
        self._count_held()
        if self.unacked and self.has_room:
            self._connection._ack(self.stream_id, self.unacked)
            self.unacked = 0
            self._connection.flush_soon()
        return message

    async def _wait_for_request(self) -> None:
        self._waiter = self._connection._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # --- CallSink ----------------------------------------------------------------------------

    def answer(self, payload: bytes) -> None:
        if self.done:
            return
        self.done = True
        self._send(wire.frame_message(payload), wire.OK_TRAILERS)

    async def message(self, payload: bytes) -> None:
        if self.done:
            raise asyncio.CancelledError  # the call already ended: its servicer stops here
        self._send(wire.frame_message(payload), None)
        # A client that stops reading: its window fills the outbox, or its socket the transport.
        while not self.done and (
            not self._connection.writable
            or (self._outbox is not None and len(self._outbox) > OUTBOX_LIMIT)
        ):
            self._writer = self._connection._loop.create_future()
            try:
                await self._writer
            finally:
                self._writer = None

    def status(self, code: int, details: str, trailing: Sequence[Any] = ()) -> None:
        if self.done:
            return
        self.done = True
        self._send(b"", wire.trailers(code, details, trailing))

    def refuse(self) -> None:
        self.status(INTERNAL, DECODE_FAILED)
        self.stop_work()

    # --- the answer's frames -----------------------------------------------------------------

    def _send(self, data: bytes, trailers: Sequence[Any] | None) -> None:
        h2 = self._h2
        sid = self.stream_id
        try:
            if not self._started:
                self._started = True
                if not data and trailers is not None:  # trailers-only: one HEADERS frame
                    h2.send_headers(sid, wire.ANSWER_HEADERS + tuple(trailers), end_stream=True)
                    self._connection.ended(self)
                    self._connection.flush_soon()
                    return
                h2.send_headers(sid, wire.ANSWER_HEADERS)
            if self._outbox is None and len(data) <= min(
                h2.local_flow_control_window(sid), h2.max_outbound_frame_size
            ):
                if data:
                    h2.send_data(sid, data)
                if trailers is not None:
                    h2.send_headers(sid, trailers, end_stream=True)
                    self._connection.ended(self)
            else:
                if self._outbox is None:
                    self._outbox = bytearray()
                    self.outbox_since = self._connection._loop.time()
                    self._connection.watch_outbox()
                self._outbox += data
                self._trailers = trailers
                self.pump()  # and counts what is left waiting
        except H2Error:  # the client reset the stream or the connection is ending
            self._outbox = self.outbox_since = None  # nothing of it can go now
            self._count_outbox()
            self._connection.ended(self)
        self._connection.flush_soon()

    def pump(self) -> None:
        """Send what the client's window now allows of the outbox, then the trailers."""
        outbox = self._outbox
        if outbox is None:
            return
        h2, sid = self._h2, self.stream_id
        try:
            while outbox:
                size = min(
                    len(outbox), h2.local_flow_control_window(sid), h2.max_outbound_frame_size
                )
                if size <= 0:
                    return
                h2.send_data(sid, bytes(outbox[:size]))
                del outbox[:size]
                self.outbox_since = self._connection._loop.time()  # the client took some
            self._outbox = self.outbox_since = None
            if self._trailers is not None:
                h2.send_headers(sid, self._trailers, end_stream=True)
                self._trailers = None
                self._connection.ended(self)
        except H2Error:
            self._outbox = self.outbox_since = None
            self._connection.ended(self)
        finally:
            self._count_outbox()
            self.wake_writer()
            self._connection.flush_soon()

    @property
    def outbox_bytes(self) -> int:
        return len(self._outbox) if self._outbox is not None else 0

    def _count_outbox(self) -> None:
        """Hold what waits in the outbox in the budget, giving back what has gone."""
        budget = self._connection.answers
        if budget is None:
            return
        waiting = len(self._outbox) if self._outbox is not None else 0
        if waiting > self._outbox_share:
            budget.hold(waiting - self._outbox_share)
        elif waiting < self._outbox_share:
            budget.give_back(self._outbox_share - waiting)
        self._outbox_share = waiting

    def wake_writer(self) -> None:
        writer = self._writer
        if writer is not None and not writer.done():
            writer.set_result(None)

    # --- the call's end ----------------------------------------------------------------------

    def expire(self) -> None:
        """The client's deadline passed: it gets DEADLINE_EXCEEDED and the work stops."""
        self.timer = None
        self.status(wire.DEADLINE_EXCEEDED, "Deadline Exceeded")
        self.stop_work()

    def stop_work(self) -> None:
        if self.context is not None:
            self.context.cancel()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()

    def abandon(self) -> None:
        """The client reset the stream or the connection went: nobody is left to answer."""
        self.done = True
        self._outbox = self.outbox_since = None
        self._count_outbox()
        self.release()
        if self.timer is not None:
            self.timer.cancel()
        self.stop_work()
        self.wake_reader()
        self.wake_writer()


def _peer(address: Any) -> str:
    """grpc's peer string: ``ipv4:HOST:PORT``, ``ipv6:[HOST]:PORT``, ``unix:PATH``."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
    return f"unix:{address}" if address else "unknown"
