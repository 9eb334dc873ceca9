"""The gRPC listener's edge: Triton's restricted protocols, as a server interceptor that every RPC
passes through before the servicer, and the in-flight cap, built into each method's handler.

A restricted group's RPC without ``triton-grpc-protocol-<key>: <value>`` metadata ends with
UNAVAILABLE ``This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'``
(Triton's answer); past the replica's in-flight cap an RPC ends with UNAVAILABLE before its work
starts. Health RPCs are never counted against the cap.

The cap is in the handlers rather than in the interceptor because an interceptor costs every RPC
a lookup through grpc's interceptor chain and a coroutine of its own, and the cap is on by
default while restrictions are rare.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import grpc

from serving.protocol.admission import InFlightLimit
from serving.protocol.grpc.registration import PerMethodHandlers
from serving.protocol.restricted import (
    GRPC_METHOD_GROUPS,
    HEALTH,
    Restriction,
    grpc_refusal,
)

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


class EdgeInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses a restricted group's RPC that lacks the group's metadata."""

    def __init__(self, restrictions: Mapping[str, Restriction]) -> None:
        self.restrictions = dict(restrictions)

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        group = GRPC_METHOD_GROUPS.get(details.method)
        restriction = self.restrictions.get(group) if group is not None else None
        if restriction is not None and not _carries(details, restriction):
            return _refusing(handler, grpc_refusal(restriction))
        return handler


class CountingTarget:
    """Stands in for a grpc server (or the relay's collector of handlers) while services
    register, and hands it each method's handler with the in-flight cap built in."""

    def __init__(self, target: Any, limit: InFlightLimit) -> None:
        self._target = target
        self._limit = limit

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        limit = self._limit
        self._target.add_generic_rpc_handlers(
            [
                PerMethodHandlers(handler, lambda method, h: _counted_handler(method, h, limit))
                for handler in handlers
            ]
        )

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        counted = {
            method: _counted_handler(f"/{service}/{method}", handler, self._limit)
            for method, handler in handlers.items()
        }
        self._target.add_registered_method_handlers(service, counted)


def _counted_handler(
    method: str, handler: grpc.RpcMethodHandler, limit: InFlightLimit
) -> grpc.RpcMethodHandler:
    """``handler`` counted against ``limit``; a health RPC's handler as it is."""
    if GRPC_METHOD_GROUPS.get(method) == HEALTH or not limit.limit:
        return handler
    return _counted(handler, limit)


def _carries(details: grpc.HandlerCallDetails, restriction: Restriction) -> bool:
    metadata = details.invocation_metadata or ()
    return any(m.key == restriction.key and m.value == restriction.value for m in metadata)


def _refusing(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    return _same_kind(handler, refuse)


def _counted(handler: grpc.RpcMethodHandler, limit: InFlightLimit) -> grpc.RpcMethodHandler:
    if handler.unary_unary is not None:
        behavior = handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if not limit.try_enter():
                await context.abort(grpc.StatusCode.UNAVAILABLE, limit.message)
            try:
                return await behavior(request, context)
            finally:
                limit.leave()

        return _same_kind(handler, unary)
    streaming = handler.stream_stream or handler.unary_stream
    if streaming is None:  # client streaming with one answer: no such RPC is served
        return handler

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if not limit.try_enter():
            await context.abort(grpc.StatusCode.UNAVAILABLE, limit.message)
        try:
            async for item in streaming(request, context):
                yield item
        finally:
            limit.leave()

    return _same_kind(handler, stream)


def _same_kind(handler: grpc.RpcMethodHandler, behavior: Any) -> grpc.RpcMethodHandler:
    """A handler like ``handler`` (same streaming kind and codecs) running ``behavior``."""
    codecs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}  # fmt: skip
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(behavior, **codecs)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(behavior, **codecs)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(behavior, **codecs)
    return grpc.stream_stream_rpc_method_handler(behavior, **codecs)
