"""``AccessMiddleware``: the HTTP listener's access check, in front of the whole ASGI app.

The path is classified the way the router reads it (``serving.protocol.http.app``); health
answers to anyone, everything else needs a token. Refusals keep Triton's ``{"error": "..."}``
shape: 401 (with ``WWW-Authenticate: Bearer``), 403, or 429 with ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from serving.access.errors import AccessCode, AccessError
from serving.access.guard import AccessGuard
from serving.access.table import Need

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

HTTP_STATUS: dict[AccessCode, int] = {
    AccessCode.UNAUTHENTICATED: 401,
    AccessCode.PERMISSION_DENIED: 403,
    AccessCode.QUOTA_EXCEEDED: 429,
}
_INFER_ACTIONS = frozenset(("infer", "generate", "generate_stream"))
_EVERY_MODEL_HEADS = frozenset(("repository", "portico"))


def route_need(path: str) -> tuple[Need, str]:
    """What a request to ``path`` needs, and the model it names ("" when none)."""
    parts = path.split("/")
    if len(parts) < 3 or parts[1] != "v2":
        return Need.SERVER, ""
    head = parts[2]
    if head == "health":
        return Need.OPEN, ""
    if head in _EVERY_MODEL_HEADS:
        return Need.EVERY_MODEL, ""
    if head != "models" or len(parts) < 4 or not parts[3]:
        return Need.SERVER, ""
    if parts[3:] == ["stats"]:
        return Need.EVERY_MODEL, ""
    rest = parts[4:]
    if len(rest) >= 2 and rest[0] == "versions":
        rest = rest[2:]
    action = rest[0] if rest else ""
    return (Need.INFER if action in _INFER_ACTIONS else Need.READ), parts[3]


class AccessMiddleware:
    """Checks every HTTP request with ``guard`` before ``app`` sees it."""

    def __init__(self, app: App, guard: AccessGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        need, model = route_need(scope["path"])
        if need is Need.OPEN:
            return await self.app(scope, receive, send)
        try:
            state = self.guard.admit(_authorization(scope["headers"]), need, model)
        except AccessError as exc:
            return await _refuse(send, exc)
        if state is None:
            return await self.app(scope, receive, send)
        try:
            await self.app(scope, receive, send)
        finally:
            self.guard.release(state)


def _authorization(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            return value.decode("latin-1")
    return None


async def _refuse(send: Send, exc: AccessError) -> None:
    body = orjson.dumps({"error": exc.message})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if exc.code is AccessCode.UNAUTHENTICATED:
        headers.append((b"www-authenticate", b"Bearer"))
    if exc.retry_after_s is not None:
        headers.append((b"retry-after", str(exc.retry_after_s).encode()))
    status = HTTP_STATUS[exc.code]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
