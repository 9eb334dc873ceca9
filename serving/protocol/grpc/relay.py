"""The serving process's end of a gRPC front-end's socket: relayed calls run the same servicer.

A ``RelayConnection`` reads every frame that arrived per wake-up and runs each call through the
handlers ``create_grpc_server`` registers (``calls.run_call``: the edge interceptor, the access
check, the servicer, the health service), with a ``CallContext`` standing in for grpc.aio's
``ServicerContext``. The answer goes back as ``MESSAGE`` frames and one ``STATUS`` frame
(``relay_wire``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc

from serving.protocol.grpc import relay_wire as wire
from serving.protocol.grpc.calls import DECODE_FAILED, INTERNAL, Dispatcher, run_call
from serving.protocol.grpc.context import CallContext

_OK = wire.encode_status(grpc.StatusCode.OK.value[0], "", ())  # the same for every call


class RelayConnection(asyncio.Protocol):
    """One front-end's socket: calls run as tasks; answers are coalesced into one write per
    loop turn."""

    def __init__(
        self, dispatcher: Dispatcher, on_ready: Callable[[], None], on_lost: Callable[[], None]
    ) -> None:
        self._dispatcher = dispatcher
        self._on_ready, self._on_lost = on_ready, on_lost
        self._reader = wire.FrameReader(self._on_frame)
        self._transport: asyncio.Transport | None = None
        self._writer = wire.FrameWriter()
        self._send = self._writer.send
        self._tasks: dict[int, tuple[asyncio.Task[None], CallContext]] = {}
        self._streams: dict[int, asyncio.Queue[bytes | None]] = {}
        self._undelivered: dict[int, asyncio.Semaphore] = {}  # a stream's answer window
        self.calls_started = 0  # calls this front-end relayed (how the load spread)

    def connection_made(self, transport: Any) -> None:
        self._transport = self._writer.transport = transport

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = self._writer.transport = None
        for task, context in list(self._tasks.values()):
            context.cancel()
            task.cancel()
        self._on_lost()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _on_frame(self, call: int, kind: int, payload: bytes) -> None:
        if kind == wire.UNARY:
            header, body = wire.split_unary(payload)
            self._start(call, header, None, body)
        elif kind == wire.OPEN:
            queue: asyncio.Queue[bytes | None] = asyncio.Queue()
            self._streams[call] = queue
            self._undelivered[call] = asyncio.Semaphore(wire.STREAM_WINDOW)
            self._start(call, payload, queue, None)
        elif kind == wire.DELIVERED:
            window = self._undelivered.get(call)
            if window is not None:
                window.release()
        elif kind in (wire.MESSAGE, wire.END):
            stream = self._streams.get(call)
            if stream is not None:
                stream.put_nowait(payload if kind == wire.MESSAGE else None)
        elif kind == wire.CANCEL:
            # NOTE: forgotten here, not only at the end of ``_run``: a CANCEL read with its call's
            # UNARY or OPEN cancels the task before its first step, and such a task never enters
            # its coroutine (it would stay here for the connection's life, its request with it).
            running = self._tasks.pop(call, None)
            self._streams.pop(call, None)
            self._undelivered.pop(call, None)
            if running is not None:
                running[1].cancel()
                running[0].cancel()
        elif kind == wire.READY:
            self._on_ready()

    def _start(
        self, call: int, header: Any, stream: asyncio.Queue[bytes | None] | None, body: Any
    ) -> None:
        method, metadata, peer, timeout_s = wire.decode_header(header)
        context = CallContext(metadata, peer, timeout_s)
        self.calls_started += 1
        requests = _RelayedRequests(stream, body, lambda: self._credit(call))
        sink = _RelaySink(self, call, self._undelivered.get(call))
        task = asyncio.get_running_loop().create_task(
            self._run(call, method, context, requests, sink)
        )
        self._tasks[call] = (task, context)

    def _credit(self, call: int) -> None:
        self._send(wire.frame(call, wire.CREDIT))

    def _status(self, call: int, code: int, details: str, trailing: Sequence[Any] = ()) -> None:
        self._send(wire.frame(call, wire.STATUS, wire.encode_status(code, details, trailing)))

    async def _run(
        self,
        call: int,
        method: str,
        context: CallContext,
        requests: _RelayedRequests,
        sink: _RelaySink,
    ) -> None:
        try:
            await run_call(
                self._dispatcher, method, context, requests, sink, where="in a relayed gRPC call"
            )
        finally:
            self._tasks.pop(call, None)
            self._streams.pop(call, None)
            self._undelivered.pop(call, None)


class _RelayedRequests:
    """A relayed call's request bytes: a ``UNARY`` frame's body, or a stream's ``MESSAGE``
    frames, each taken one granting the front-end a ``CREDIT`` to send the next."""

    __slots__ = ("_stream", "_body", "_took")

    def __init__(
        self, stream: asyncio.Queue[bytes | None] | None, body: Any, took: Callable[[], None]
    ) -> None:
        self._stream, self._body, self._took = stream, body, took

    async def single(self) -> bytes | None:
        if self._stream is None:
            body: bytes = self._body  # as the frame reader gave it: no copy of a large tensor
            return body
        data = await self._stream.get()
        if data is not None:
            self._took()
        return data

    async def stream(self) -> AsyncIterator[bytes]:
        if self._stream is None:
            yield self._body
            return
        while (data := await self._stream.get()) is not None:
            self._took()  # the front-end may send one more
            yield data


class _RelaySink:
    """A relayed call's answer, as frames on the front-end's socket. A stream's answers wait for
    room in its window (``DELIVERED``), as in-process they wait for the client to read."""

    __slots__ = ("_connection", "_call", "_window")

    def __init__(
        self, connection: RelayConnection, call: int, window: asyncio.Semaphore | None
    ) -> None:
        self._connection, self._call, self._window = connection, call, window

    def answer(self, payload: bytes) -> None:
        call = self._call
        self._connection._send(
            wire.frame(call, wire.MESSAGE, payload) + wire.frame(call, wire.STATUS, _OK)
        )

    async def message(self, payload: bytes) -> None:
        if self._window is not None:
            await self._window.acquire()
        self._connection._send(wire.frame(self._call, wire.MESSAGE, payload))

    def status(self, code: int, details: str, trailing: Sequence[Any] = ()) -> None:
        self._connection._status(self._call, code, details, trailing)

    def refuse(self) -> None:
        self.status(INTERNAL, DECODE_FAILED)
        running = self._connection._tasks.get(self._call)
        if running is not None:
            running[0].cancel()  # its own answer, if any, would come after this one
