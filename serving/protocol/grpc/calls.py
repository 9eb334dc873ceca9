"""One gRPC call run through the registered handlers without grpc.aio: how the relay (a front-end
process's calls) and the HTTP/2 listener (``http2_connection``) serve a call alike.

The handlers are the ones ``register_services`` registers (the in-flight cap, the access check,
the servicer, the health service), found through the edge interceptor as grpc.aio finds them.
Where the request bytes come from and where the answer goes is the caller's: a ``CallRequests``
and a ``CallSink``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import grpc

from serving.incidents import report_incident
from serving.protocol.grpc.context import CallContext, CallDetails

logger = logging.getLogger("serving.grpc")

INTERNAL = grpc.StatusCode.INTERNAL.value[0]
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
DECODE_FAILED = "Exception deserializing request!"  # grpc's own words
NOT_FOUND = "Method not found!"  # grpc's own words


class CallRequests(Protocol):
    async def single(self) -> bytes | None:
        """A unary call's one request message; None when the call has already ended (its
        status sent) because the request broke the rules."""

    def stream(self) -> AsyncIterator[bytes]:
        """The call's request messages as they arrive, until the client's half-close."""


class CallSink(Protocol):
    def answer(self, payload: bytes) -> None:
        """The one answer of a call that ends OK with no trailing metadata (nearly every call)."""

    async def message(self, payload: bytes) -> None:
        """One answer message; returns once the call may send another."""

    def status(self, code: int, details: str, trailing: Sequence[Any] = ()) -> None:
        """The call's end."""

    def refuse(self) -> None:
        """End the call INTERNAL because a request message did not decode, and stop its work."""


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


class _Collector:
    """Takes what ``add_*_to_server`` registers, in place of a grpc server."""

    def __init__(self) -> None:
        self.handlers: list[grpc.GenericRpcHandler] = []

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self.handlers.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        """The generic handlers already cover these."""


def _chained(interceptor: Any, continuation: Any) -> Any:
    async def call(details: Any) -> Any:
        return await interceptor.intercept_service(continuation, details)

    return call


async def run_call(
    dispatcher: Dispatcher,
    method: str,
    context: CallContext,
    requests: CallRequests,
    sink: CallSink,
    *,
    where: str,
) -> None:
    """Serve one call to its end; every outcome becomes a status on ``sink``."""
    try:
        handler = await dispatcher.handler(CallDetails(method, context))
        if handler is None:
            sink.status(UNIMPLEMENTED, NOT_FOUND)
            return
        if handler.unary_unary is not None:  # nearly every call
            body = await requests.single()
            if body is not None:
                await _answer_unary(handler, context, body, sink)
            return
        await _answer_stream(handler, context, _decoded(handler, requests, sink), sink)
    except asyncio.CancelledError:
        return  # the client went away: nobody is left to answer
    except grpc.aio.AbortError:
        code = context.code or grpc.StatusCode.UNKNOWN
        sink.status(code.value[0], context.details, context.trailing)
    except Exception as exc:  # noqa: BLE001 - one call's failure never ends the connection
        if context.code is not None:  # the generated UNIMPLEMENTED answers set it, then raise
            sink.status(context.code.value[0], context.details, context.trailing)
        else:
            incident = report_incident(exc, logger=logger, where=where)
            sink.status(grpc.StatusCode.UNKNOWN.value[0], incident.message)


async def _answer_unary(
    handler: grpc.RpcMethodHandler, context: CallContext, body: bytes, sink: CallSink
) -> None:
    try:
        request = (handler.request_deserializer or bytes)(body)
    except Exception:  # noqa: BLE001 - a malformed message is the client's error
        sink.status(INTERNAL, DECODE_FAILED)
        return
    result = handler.unary_unary(request, context)
    if inspect.isawaitable(result):
        result = await result
    answer = (handler.response_serializer or bytes)(result)
    if context.code is None and not context.trailing:
        sink.answer(answer)
        return
    await sink.message(answer)
    code = context.code or grpc.StatusCode.OK
    sink.status(code.value[0], context.details, context.trailing)


async def _answer_stream(
    handler: grpc.RpcMethodHandler,
    context: CallContext,
    requests: AsyncIterator[Any],
    sink: CallSink,
) -> None:
    serialize = handler.response_serializer or bytes
    if handler.unary_stream is not None:
        request: Any = await anext(requests, _REFUSED)
        if request is _REFUSED:
            return
        behavior = handler.unary_stream
    else:
        request = requests
        behavior = handler.stream_unary or handler.stream_stream
    result = behavior(request, context)
    if inspect.isawaitable(result):
        result = await result
    if handler.stream_unary is not None:
        await sink.message(serialize(result))
    else:
        try:
            async for answer in result:
                await sink.message(serialize(answer))
        finally:  # a call ended mid-stream closes its servicer now, not when it is collected
            close = getattr(result, "aclose", None)
            if close is not None:
                await close()
    code = context.code or grpc.StatusCode.OK
    sink.status(code.value[0], context.details, context.trailing)


_REFUSED = object()  # a request that did not decode; its status is already sent


async def _decoded(
    handler: grpc.RpcMethodHandler, requests: CallRequests, sink: CallSink
) -> AsyncIterator[Any]:
    """The call's request messages, decoded as the handler's codec says; a message that does not
    decode ends the call as grpc does (INTERNAL)."""
    decode = handler.request_deserializer or bytes
    async for data in requests.stream():
        try:
            message = decode(data)
        except Exception:  # noqa: BLE001 - a malformed message is the client's error
            sink.refuse()
            return
        yield message
