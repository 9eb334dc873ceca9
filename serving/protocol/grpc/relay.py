"""The serving process's end of a gRPC front-end's socket: relayed calls run the same servicer.

A ``RelayConnection`` reads every frame that arrived per wake-up and runs each call through the
handlers ``create_grpc_server`` registers (the edge interceptor, the access check, the servicer,
the health service), with a ``RelayContext`` standing in for grpc.aio's ``ServicerContext``.
The answer goes back as ``MESSAGE`` frames and one ``STATUS`` frame (``relay_wire``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, NamedTuple

import grpc

from serving.incidents import report_incident
from serving.protocol.grpc import relay_wire as wire

logger = logging.getLogger("serving.grpc")

_REFUSED = object()  # a request that did not decode; its status is already sent
INTERNAL = grpc.StatusCode.INTERNAL.value[0]
DECODE_FAILED = "Exception deserializing request!"  # grpc's own words


_OK = wire.encode_status(grpc.StatusCode.OK.value[0], "", ())  # the same for every call


class Metadatum(NamedTuple):
    key: str
    value: str | bytes


class CallDetails:
    """What ``grpc.HandlerCallDetails`` carries, for the edge interceptor (the metadata only
    built when it looks)."""

    __slots__ = ("method", "_context")

    def __init__(self, method: str, context: RelayContext) -> None:
        self.method, self._context = method, context

    @property
    def invocation_metadata(self) -> tuple[Metadatum, ...]:
        return self._context.invocation_metadata()


class RelayContext:
    """The part of ``grpc.aio.ServicerContext`` the servicers and the edge use, for one call."""

    __slots__ = ("_raw_metadata", "_metadata", "_peer", "_deadline", "_cancelled", "code",
                 "details", "trailing")  # fmt: skip

    def __init__(self, metadata: wire.Metadata, peer: str, timeout_s: float | None) -> None:
        self._raw_metadata = metadata
        self._metadata: tuple[Metadatum, ...] | None = None  # built when first asked for
        self._peer = peer
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._cancelled = False
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.trailing: tuple[tuple[str, Any], ...] = ()

    def invocation_metadata(self) -> tuple[Metadatum, ...]:
        if self._metadata is None:
            self._metadata = tuple(Metadatum(key, value) for key, value in self._raw_metadata)
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Sequence[Any] = ()
    ) -> None:
        self.code, self.details = code, details
        if trailing_metadata:
            self.trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def set_trailing_metadata(self, metadata: Sequence[Any]) -> None:
        self.trailing = tuple(metadata)

    def trailing_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self.trailing


class _Collector:
    """Takes what ``add_*_to_server`` registers, in place of a grpc server."""

    def __init__(self) -> None:
        self.handlers: list[grpc.GenericRpcHandler] = []

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self.handlers.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        """The generic handlers already cover these."""


class Dispatcher:
    """Finds a method's handler the way grpc.aio does: through the interceptor, if any."""

    def __init__(self, register: Callable[[Any], None], interceptors: Sequence[Any] = ()) -> None:
        collector = _Collector()
        register(collector)
        self._generic = collector.handlers
        continuation = self._lookup
        for interceptor in reversed(tuple(interceptors)):
            continuation = _chained(interceptor, continuation)
        self._continuation = continuation

    async def handler(self, details: CallDetails) -> grpc.RpcMethodHandler | None:
        return await self._continuation(details)

    async def _lookup(self, details: Any) -> grpc.RpcMethodHandler | None:
        for generic in self._generic:
            found = generic.service(details)
            if found is not None:
                return found
        return None


def _chained(interceptor: Any, continuation: Any) -> Any:
    async def call(details: Any) -> Any:
        return await interceptor.intercept_service(continuation, details)

    return call


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
        self._tasks: dict[int, tuple[asyncio.Task[None], RelayContext]] = {}
        self._streams: dict[int, asyncio.Queue[bytes | None]] = {}
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
            self._start(call, payload, queue, None)
        elif kind in (wire.MESSAGE, wire.END):
            stream = self._streams.get(call)
            if stream is not None:
                stream.put_nowait(payload if kind == wire.MESSAGE else None)
        elif kind == wire.CANCEL:
            running = self._tasks.get(call)
            if running is not None:
                running[1].cancel()
                running[0].cancel()
        elif kind == wire.READY:
            self._on_ready()

    def _start(
        self, call: int, header: Any, stream: asyncio.Queue[bytes | None] | None, body: Any
    ) -> None:
        method, metadata, peer, timeout_s = wire.decode_header(header)
        context = RelayContext(metadata, peer, timeout_s)
        self.calls_started += 1
        task = asyncio.get_running_loop().create_task(
            self._run(call, method, context, stream, body)
        )
        self._tasks[call] = (task, context)

    def _refuse(self, call: int) -> None:
        self._status(call, INTERNAL, DECODE_FAILED)
        running = self._tasks.get(call)
        if running is not None:
            running[0].cancel()  # its own answer, if any, would come after this one

    def _credit(self, call: int) -> None:
        self._send(wire.frame(call, wire.CREDIT))

    def _status(self, call: int, code: int, details: str, trailing: Sequence[Any] = ()) -> None:
        self._send(wire.frame(call, wire.STATUS, wire.encode_status(code, details, trailing)))

    async def _run(
        self,
        call: int,
        method: str,
        context: RelayContext,
        stream: asyncio.Queue[bytes | None] | None,
        body: Any,
    ) -> None:
        try:
            handler = await self._dispatcher.handler(CallDetails(method, context))
            if handler is None:
                self._status(call, grpc.StatusCode.UNIMPLEMENTED.value[0], "Method not found!")
                return
            if stream is None and handler.unary_unary is not None:  # nearly every call
                await self._answer_unary(call, handler, context, body)
                return
            requests = _requests(
                handler, stream, body, lambda: self._refuse(call), lambda: self._credit(call)
            )
            await self._answer(call, handler, context, requests)
        except asyncio.CancelledError:
            return  # the client went away: nobody is left to answer
        except grpc.aio.AbortError:
            code = context.code or grpc.StatusCode.UNKNOWN
            self._status(call, code.value[0], context.details, context.trailing)
        except Exception as exc:  # noqa: BLE001 - one call's failure never ends the relay
            if context.code is not None:  # the generated UNIMPLEMENTED answers set it, then raise
                self._status(call, context.code.value[0], context.details, context.trailing)
            else:
                incident = report_incident(exc, logger=logger, where="in a relayed gRPC call")
                self._status(call, grpc.StatusCode.UNKNOWN.value[0], incident.message)
        finally:
            self._tasks.pop(call, None)
            self._streams.pop(call, None)

    async def _answer_unary(
        self, call: int, handler: grpc.RpcMethodHandler, context: RelayContext, body: Any
    ) -> None:
        try:
            request = (handler.request_deserializer or bytes)(body)
        except Exception:  # noqa: BLE001 - a malformed message is the client's error
            self._status(call, INTERNAL, DECODE_FAILED)
            return
        result = handler.unary_unary(request, context)
        if inspect.isawaitable(result):
            result = await result
        answer = (handler.response_serializer or bytes)(result)
        if context.code is None and not context.trailing:
            self._send(wire.frame(call, wire.MESSAGE, answer) + wire.frame(call, wire.STATUS, _OK))
        else:
            self._send(wire.frame(call, wire.MESSAGE, answer))
            code = context.code or grpc.StatusCode.OK
            self._status(call, code.value[0], context.details, context.trailing)

    async def _answer(
        self,
        call: int,
        handler: grpc.RpcMethodHandler,
        context: RelayContext,
        requests: AsyncIterator[Any],
    ) -> None:
        serialize = handler.response_serializer or bytes
        send = self._send
        if handler.unary_unary is not None or handler.unary_stream is not None:
            request: Any = await anext(requests, _REFUSED)
            if request is _REFUSED:
                return
            behavior = handler.unary_unary or handler.unary_stream
        else:
            request = requests
            behavior = handler.stream_unary or handler.stream_stream
        result = behavior(request, context)
        if inspect.isawaitable(result):
            result = await result
        if handler.unary_unary is not None or handler.stream_unary is not None:
            send(wire.frame(call, wire.MESSAGE, serialize(result)))
        else:
            async for answer in result:
                send(wire.frame(call, wire.MESSAGE, serialize(answer)))
        code = context.code or grpc.StatusCode.OK
        self._status(call, code.value[0], context.details, context.trailing)


async def _requests(
    handler: grpc.RpcMethodHandler,
    stream: asyncio.Queue[bytes | None] | None,
    body: Any,
    refuse: Callable[[], None],
    took: Callable[[], None],
) -> AsyncIterator[Any]:
    """The call's request messages, decoded as the handler's codec says; a message that does not
    decode ends the call as grpc does (INTERNAL), through ``refuse``."""
    decode = handler.request_deserializer or bytes
    while True:
        if stream is None:
            data, stream = body, asyncio.Queue()
            stream.put_nowait(None)
        elif (data := await stream.get()) is None:
            return
        else:
            took()  # the front-end may send one more
        try:
            message = decode(data)
        except Exception:  # noqa: BLE001 - a malformed message is the client's error
            refuse()
            return
        yield message
