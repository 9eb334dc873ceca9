"""How the services' handlers reach the gRPC listener: which RPCs are pre-registered with grpc
(the inference ones only), and the inference RPCs' messages read and written in place.

grpc.aio keeps one pending "request call" per registered method, and one more for every other
method, and after each call it accepts it waits on all of them with ``asyncio.wait``: a cost on
every RPC that grows with the number of registered methods. The generated code registers every
method of a service (22 with the health service), nearly all of them rare. Only the inference
RPCs stay registered; grpc serves the others through the generic handler that the generated code
adds beside the registered ones, which answers for any method not registered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

from serving.protocol.grpc.infer_wire import (
    parse_infer_request,
    serialize_infer_response,
    serialize_stream_infer_response,
)

REGISTERED_METHODS = frozenset(("ModelInfer", "ModelStreamInfer"))


class InferenceMethodsOnly:
    """Stands in for a grpc server while services register; passes on generic handlers as they
    are, and of the registered ones only the inference RPCs'."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._target.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        kept = {method: h for method, h in handlers.items() if method in REGISTERED_METHODS}
        if kept:
            self._target.add_registered_method_handlers(service, kept)


# The inference RPCs whose requests are parsed with their tensors left in the received bytes
# (``infer_wire``): the only RPCs whose messages are large.
IN_PLACE_METHODS = frozenset(
    f"/inference.GRPCInferenceService/{method}" for method in ("ModelInfer", "ModelStreamInfer")
)


class InferRequestsInPlace:
    """Stands in for a grpc server while services register; hands on every handler, the
    inference RPCs' parsing their requests with ``parse_infer_request``."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._target.add_generic_rpc_handlers(
            [PerMethodHandlers(h, _in_place_if_inference) for h in handlers]
        )

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        self._target.add_registered_method_handlers(
            service,
            {
                method: _in_place_if_inference(f"/{service}/{method}", handler)
                for method, handler in handlers.items()
            },
        )


class PerMethodHandlers(grpc.GenericRpcHandler):  # type: ignore[misc]
    """``generic``'s answer for each method passed through ``adapt(method, handler)``, once per
    method: ``service`` runs on every RPC."""

    def __init__(
        self,
        generic: grpc.GenericRpcHandler,
        adapt: Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler],
    ) -> None:
        self._generic = generic
        self._adapt = adapt
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}  # method -> its adapted handler

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._handlers.get(details.method)
        if handler is None:
            handler = self._generic.service(details)
            if handler is None:
                return None
            handler = self._adapt(details.method, handler)
            self._handlers[details.method] = handler
        return handler


def _in_place_if_inference(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    return _in_place(handler) if method in IN_PLACE_METHODS else handler


def _in_place(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` parsing its requests in place and writing its answers from their outputs'
    memory."""
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            handler.unary_unary,
            request_deserializer=parse_infer_request,
            response_serializer=serialize_infer_response,
        )
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            handler.stream_stream,
            request_deserializer=parse_infer_request,
            response_serializer=serialize_stream_infer_response,
        )
    return handler
