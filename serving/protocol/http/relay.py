"""The serving process's end of an HTTP front-end's socket: relayed requests run the same ASGI
stack as the in-process listener (restricted APIs, the token check, the in-flight cap, the app).

Each ``REQUEST`` frame becomes an ASGI ``http`` scope whose ``receive`` hands over the body as its
pieces came (nearly always in that one frame), then waits for the client to go away (a
``DISCONNECT`` frame, or the front-end's socket closing), which the request's
``DisconnectWatch`` also passes on to ``until_disconnect``; ``send`` turns the answer into a
``START`` frame and ``BODY``/``END`` frames (``relay_wire``), a ``BODY`` waiting while
``STREAM_WINDOW`` of them are not yet ``DELIVERED`` to the client, and an ``END`` marked
``UNTIL_DELIVERED`` until every one is (an answer counted until it has gone, ``app._send_pieces``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from serving.incidents import report_incident
from serving.protocol.http import relay_wire as wire
from serving.protocol.http.disconnect import DisconnectWatch, attach_disconnect_watch

logger = logging.getLogger("serving.http")

Message = MutableMapping[str, Any]
App = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]

_ASGI = {"version": "3.0", "spec_version": "2.3"}
_LOST_ANSWER = b'{"error":"the server failed while answering"}'


class RelayedRequest:
    """One relayed request's ``receive`` and ``send``."""

    __slots__ = (
        "call", "_chunks", "_arrived", "_gone", "_send_frame", "_started", "_finished", "_watch",
        "_undelivered", "_room",
    )  # fmt: skip

    def __init__(
        self,
        call: int,
        body: memoryview,
        more_body: bool,
        send_frame: Callable[[bytes], None],
        watch: DisconnectWatch,
    ) -> None:
        self.call = call
        self._watch = watch
        self._chunks: collections.deque[tuple[memoryview, bool]] = collections.deque()
        self._chunks.append((body, more_body))
        self._arrived = asyncio.Event()
        self._gone = False
        self._send_frame = send_frame
        self._started = self._finished = False
        self._undelivered = 0  # BODY pieces sent that the front-end has not passed on yet
        self._room: asyncio.Event | None = None  # made only for a stream that fills its window

    def add_body(self, chunk: memoryview, *, more_body: bool) -> None:
        self._chunks.append((chunk, more_body))
        self._arrived.set()

    def disconnect(self) -> None:
        self._gone = True
        self._arrived.set()
        self._watch.lost()
        if self._room is not None:
            self._room.set()  # a ``send`` waiting for room finds nobody left to read

    def delivered(self) -> None:
        """The front-end passed one ``BODY`` piece on to its client."""
        self._undelivered -= 1
        if self._room is not None:
            self._room.set()

    async def receive(self) -> Message:
        while True:
            if self._chunks:
                body, more = self._chunks.popleft()
                return {"type": "http.request", "body": body, "more_body": more}
            if self._gone:
                return {"type": "http.disconnect"}
            self._arrived.clear()
            await self._arrived.wait()

    async def send(self, message: Message) -> None:
        if self._finished or self._gone:
            return  # nobody is left to read it
        kind = message["type"]
        if kind == "http.response.start":
            self._started = True
            start = wire.encode_start(message["status"], message.get("headers") or ())
            self._send_frame(wire.frame(self.call, wire.START, start))
        elif kind == "http.response.body":
            more = bool(message.get("more_body"))
            body = message.get("body") or b""
            if more:
                if not await self._undelivered_at_most(wire.STREAM_WINDOW - 1):
                    return
                self._undelivered += 1
            elif message.get(wire.UNTIL_DELIVERED) and not await self._undelivered_at_most(0):
                return
            self._finished = not more
            self._send_frame(wire.frame(self.call, wire.BODY if more else wire.END, body))

    async def _undelivered_at_most(self, most: int) -> bool:
        """Wait while more than ``most`` pieces are not yet passed on (the client is not
        reading); False once it left."""
        while self._undelivered > most and not self._gone:
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()
        return not self._gone

    def finish(self) -> None:
        """After the app returned: an answer it left unfinished ends here, so the front-end's
        client is never left waiting (500 if nothing was sent, else the body is cut short)."""
        if self._finished or self._gone:
            return
        if not self._started:
            start = wire.encode_start(500, ((b"content-type", b"application/json"),))
            self._send_frame(wire.frame(self.call, wire.START, start))
            self._send_frame(wire.frame(self.call, wire.END, _LOST_ANSWER))
        else:
            self._send_frame(wire.frame(self.call, wire.END))
        self._finished = True


class HttpRelayConnection(asyncio.Protocol):
    """One HTTP front-end's socket: requests run as tasks; answers leave coalesced, one write
    per loop turn."""

    def __init__(self, app: App, on_ready: Callable[[], None], on_lost: Callable[[], None]) -> None:
        self._app = app
        self._on_ready, self._on_lost = on_ready, on_lost
        self._reader = wire.FrameReader(self._on_frame)
        self._writer = wire.FrameWriter()
        self._requests: dict[int, tuple[asyncio.Task[None], RelayedRequest]] = {}
        self.calls_started = 0  # requests this front-end relayed (how the load spread)

    def connection_made(self, transport: Any) -> None:
        self._writer.transport = transport

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._writer.transport = None
        for _, request in list(self._requests.values()):
            request.disconnect()  # the app stops as for a client that went away
        self._on_lost()

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    def close(self) -> None:
        if self._writer.transport is not None:
            self._writer.transport.close()

    def _on_frame(self, call: int, kind: int, payload: bytes) -> None:
        if kind == wire.REQUEST:
            head, body = wire.split_unary(payload)
            self._start(call, wire.decode_head(head), body)
        elif kind in (wire.REQUEST_BODY, wire.REQUEST_END):
            running = self._requests.get(call)
            if running is not None:  # one the app already answered takes no more body
                running[1].add_body(memoryview(payload), more_body=kind == wire.REQUEST_BODY)
        elif kind == wire.DELIVERED:
            running = self._requests.get(call)
            if running is not None:
                running[1].delivered()
        elif kind == wire.DISCONNECT:
            running = self._requests.get(call)
            if running is not None:
                running[1].disconnect()
        elif kind == wire.READY:
            self._on_ready()

    def _start(self, call: int, head: wire.RequestHead, body: memoryview) -> None:
        scope = {
            "type": "http", "asgi": _ASGI, "http_version": head.http_version,
            "method": head.method, "scheme": head.scheme, "path": head.path,
            "raw_path": head.raw_path, "query_string": head.query_string, "root_path": "",
            "headers": list(head.headers), "client": head.client, "server": head.server,
        }  # fmt: skip
        watch = attach_disconnect_watch(scope)
        request = RelayedRequest(call, body, head.more_body, self._writer.send, watch)
        self.calls_started += 1
        task = asyncio.get_running_loop().create_task(self._run(scope, request))
        self._requests[call] = (task, request)

    async def _run(self, scope: MutableMapping[str, Any], request: RelayedRequest) -> None:
        try:
            await self._app(scope, request.receive, request.send)
        except Exception as exc:  # noqa: BLE001 - one request's failure never ends the relay
            report_incident(exc, logger=logger, where="in a relayed HTTP request")
        finally:
            request.finish()
            self._requests.pop(request.call, None)
