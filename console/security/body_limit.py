"""ASGI middleware in front of Django that caps request bodies before anything reads them.

Django's ASGI handler spools a whole body to memory and disk before it routes or authenticates,
so without this a stranger could make it write gigabytes. A declared ``Content-Length`` over the
route's limit is refused at once; a chunked body is counted as it arrives and cut off past it.
Either way the client gets a 413 with the API's error JSON and the app never sees the request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class RouteLimit:
    """A larger (or smaller) limit for one method on the paths ``pattern`` matches."""

    method: str
    pattern: re.Pattern[str]
    max_bytes: int


class RequestBodyLimit:
    """Refuses HTTP request bodies over ``default_max_bytes`` (or their route's limit) with 413."""

    def __init__(
        self, app: ASGIApp, *, default_max_bytes: int, routes: Sequence[RouteLimit] = ()
    ) -> None:
        self.app = app
        self.default_max_bytes = default_max_bytes
        self.routes = tuple(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["method"], scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, limit)
            return
        await _LimitedRequest(self.app, limit).run(scope, receive, send)

    def limit_for(self, method: str, path: str) -> int:
        for route in self.routes:
            if route.method == method and route.pattern.match(path):
                return route.max_bytes
        return self.default_max_bytes


class _LimitedRequest:
    """One request whose body is counted as the app receives it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.received = 0
        self.exceeded = False
        self.response_started = False

    async def run(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def limited_receive() -> Message:
            if self.exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                self.received += len(message.get("body", b""))
                if self.received > self.limit:
                    # The app sees a client that went away: Django drops what it spooled.
                    self.exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.response_started = True
            await send(message)

        await self.app(scope, limited_receive, tracked_send)
        if self.exceeded and not self.response_started:
            await _refuse(send, self.limit)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, limit: int) -> None:
    body = json.dumps(
        {
            "message": f"The request body is larger than this route accepts ({limit} bytes).",
            "code": "request_too_large",
            "extra": {"max_bytes": limit},
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def request_body_limit(app: ASGIApp) -> RequestBodyLimit:
    """``app`` behind the limits in settings: ``PORTICO_MAX_REQUEST_BYTES`` everywhere, except a
    browser upload chunk (``PORTICO_UPLOAD_CHUNK_MAX_BYTES``) and an archive posted to the API in
    one piece (``PORTICO_MAX_UPLOAD_BYTES`` plus its multipart framing)."""
    from django.conf import settings

    return RequestBodyLimit(
        app,
        default_max_bytes=settings.PORTICO_MAX_REQUEST_BYTES,
        routes=(
            RouteLimit(
                "PUT",
                re.compile(r"^/uploads/sessions/[0-9a-f]{32}/$"),
                settings.PORTICO_UPLOAD_CHUNK_MAX_BYTES,
            ),
            RouteLimit(
                "POST",
                re.compile(r"^/api/models/[^/]+/versions/$"),
                settings.PORTICO_MAX_UPLOAD_BYTES + settings.PORTICO_MULTIPART_OVERHEAD_BYTES,
            ),
        ),
    )
