"""``AccessInterceptor``: the gRPC listener's access check, one interceptor on the server.

Each RPC's handler is wrapped once (per method, cached): the token comes from the ``authorization``
metadata, the model from the request message. ServerLive, ServerReady and ``grpc.health.v1`` stay
open. A stream is authenticated when it opens and holds one concurrency slot while open; each of
its messages is checked for scope and rate, and the first refused one ends the stream with that
status once the answers to earlier messages are out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from serving.access.errors import AccessCode, AccessError
from serving.access.guard import AccessGuard
from serving.access.table import Need

GRPC_STATUS: dict[AccessCode, grpc.StatusCode] = {
    AccessCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    AccessCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    AccessCode.QUOTA_EXCEEDED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
_SERVICE = "/inference.GRPCInferenceService/"
OPEN_METHODS = frozenset(
    (_SERVICE + "ServerLive", _SERVICE + "ServerReady",
     "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch")
)  # fmt: skip
STREAM_METHOD = _SERVICE + "ModelStreamInfer"
NeedOf = Callable[[Any], tuple[Need, str]]
_NEEDS: dict[str, NeedOf] = {
    _SERVICE + "ModelInfer": lambda r: (Need.INFER, r.model_name),
    _SERVICE + "ModelMetadata": lambda r: (Need.READ, r.name),
    _SERVICE + "ModelConfig": lambda r: (Need.READ, r.name),
    _SERVICE + "ModelReady": lambda r: (Need.READ, r.name),
    _SERVICE + "ModelStatistics": lambda r: (Need.READ, r.name) if r.name else (
        Need.EVERY_MODEL, ""),
    _SERVICE + "RepositoryIndex": lambda r: (Need.EVERY_MODEL, ""),
    _SERVICE + "RepositoryModelLoad": lambda r: (Need.EVERY_MODEL, ""),
    _SERVICE + "RepositoryModelUnload": lambda r: (Need.EVERY_MODEL, ""),
}  # fmt: skip


def _server_need(request: Any) -> tuple[Need, str]:
    return Need.SERVER, ""


class AccessInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Checks every gRPC call with ``guard`` before the servicer sees it."""

    def __init__(self, guard: AccessGuard) -> None:
        self.guard = guard
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method = details.method
        if handler is None or method in OPEN_METHODS:
            return handler
        cached = self._wrapped.get(method)
        if cached is None or cached[0] is not handler:
            cached = (handler, self._wrap(method, handler))
            self._wrapped[method] = cached
        return cached[1]

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        options = {"request_deserializer": handler.request_deserializer,
                   "response_serializer": handler.response_serializer}  # fmt: skip
        if handler.unary_unary is not None:
            unary = self._unary(handler.unary_unary, _NEEDS.get(method, _server_need))
            return grpc.unary_unary_rpc_method_handler(unary, **options)
        if handler.stream_stream is not None:
            stream = self._stream(handler.stream_stream, per_message=method == STREAM_METHOD)
            return grpc.stream_stream_rpc_method_handler(stream, **options)
        # NOTE: the inference service has no other shapes; refused rather than let through.
        return grpc.unary_unary_rpc_method_handler(_unimplemented, **options)

    def _unary(self, behavior: Any, need_of: NeedOf) -> Any:
        guard = self.guard

        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            need, model = need_of(request)
            try:
                state = guard.admit(_authorization(context), need, model)
            except AccessError as exc:
                return await _abort(context, exc)
            if state is None:
                return await behavior(request, context)
            try:
                return await behavior(request, context)
            finally:
                guard.release(state)

        return checked

    def _stream(self, behavior: Any, *, per_message: bool) -> Any:
        guard = self.guard

        async def checked(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            try:
                state = guard.admit_stream(_authorization(context))
            except AccessError as exc:
                await _abort(context, exc)
            refused: list[AccessError] = []

            async def messages() -> AsyncIterator[Any]:
                async for message in requests:
                    try:
                        guard.admit_message(_authorization(context), message.model_name)
                    except AccessError as exc:
                        refused.append(exc)
                        return
                    yield message

            try:
                async for answer in behavior(messages() if per_message else requests, context):
                    yield answer
            finally:
                if state is not None:
                    guard.release(state)
            if refused:
                await _abort(context, refused[0])

        return checked


async def _unimplemented(request: Any, context: Any) -> None:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not available with inference access")


async def _abort(context: Any, exc: AccessError) -> Any:
    if exc.retry_after_s is not None:
        context.set_trailing_metadata((("retry-after", str(exc.retry_after_s)),))
    await context.abort(GRPC_STATUS[exc.code], exc.message)


def _authorization(context: Any) -> str | None:
    for item in context.invocation_metadata() or ():
        if item.key == "authorization":
            value = item.value
            return value if isinstance(value, str) else value.decode("latin-1")
    return None
