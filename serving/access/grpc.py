"""``GuardedServicer``: the gRPC listener's access check, one dispatch check per RPC.

The inference servicer is registered through this proxy, so every RPC's behaviour is wrapped once
(on first use), the generated registration keeps grpc's registered-method path, and no
interceptor pipeline runs per call. The token comes from the ``authorization`` metadata, the model
from the request message. ServerLive and ServerReady stay
open, and the ``grpc.health.v1`` service is not behind this proxy at all. A stream is
authenticated when it opens and holds one concurrency slot while open; each of its messages is
checked for scope and rate, and the first refused one ends the stream with that status once the
answers to earlier messages are out.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
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
OPEN_RPCS = frozenset(("ServerLive", "ServerReady"))
STREAM_RPC = "ModelStreamInfer"
NeedOf = Callable[[Any], tuple[Need, str]]
_NEEDS: dict[str, NeedOf] = {
    "ModelInfer": lambda r: (Need.INFER, r.model_name),
    "ModelMetadata": lambda r: (Need.READ, r.name),
    "ModelConfig": lambda r: (Need.READ, r.name),
    "ModelReady": lambda r: (Need.READ, r.name),
    "ModelStatistics": lambda r: (Need.READ, r.name) if r.name else (Need.EVERY_MODEL, ""),
    "RepositoryIndex": lambda r: (Need.EVERY_MODEL, ""),
    "RepositoryModelLoad": lambda r: (Need.EVERY_MODEL, ""),
    "RepositoryModelUnload": lambda r: (Need.EVERY_MODEL, ""),
}


def _server_need(request: Any) -> tuple[Need, str]:
    return Need.SERVER, ""


class GuardedServicer:
    """``servicer`` with every RPC checked by ``guard`` before it runs (health RPCs excepted)."""

    def __init__(self, servicer: Any, guard: AccessGuard) -> None:
        self._servicer = servicer
        self._guard = guard

    def __getattr__(self, name: str) -> Any:
        behavior = getattr(self._servicer, name)
        if name.startswith("_") or name in OPEN_RPCS or not callable(behavior):
            return behavior
        if name == STREAM_RPC:
            wrapped = _stream(self._guard, behavior)
        else:
            wrapped = _unary(self._guard, behavior, _NEEDS.get(name, _server_need))
        setattr(self, name, wrapped)  # wrapped once; later lookups find the attribute
        return wrapped


def _unary(guard: AccessGuard, behavior: Any, need_of: NeedOf) -> Any:
    async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
        need, model = need_of(request)
        try:
            state = guard.admit(_authorization(context), need, model)
        except AccessError as exc:
            return await _abort(context, exc)
        try:
            result = behavior(request, context)
            # NOTE: the generated UNIMPLEMENTED answers are plain functions.
            return await result if inspect.isawaitable(result) else result
        finally:
            if state is not None:
                guard.release(state)

    return checked


def _stream(guard: AccessGuard, behavior: Any) -> Any:
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
            async for answer in behavior(messages(), context):
                yield answer
        finally:
            if state is not None:
                guard.release(state)
        if refused:
            await _abort(context, refused[0])

    return checked


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
