"""Triton's restricted APIs over HTTP: an ASGI layer in front of the application.

A request to a route whose API group is restricted passes only with the group's header and value;
otherwise it is answered 403 ``This API is restricted, expecting header '<header>'`` before the
application sees it (Triton checks before the method, so a wrong verb is refused the same way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serving.protocol.http.answers import Send, send_error
from serving.protocol.restricted import Restriction, http_group, http_refusal

App = Any


class RestrictedApiMiddleware:
    """Refuses requests to restricted API groups that lack the group's header."""

    def __init__(self, app: App, restrictions: Mapping[str, Restriction]) -> None:
        self.app = app
        # group -> (header, value) as ASGI delivers them (lower-case name, raw bytes), and refusal
        self.checks = {
            group: ((r.key.encode(), r.value.encode()), http_refusal(r))
            for group, r in restrictions.items()
        }

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] == "http":
            group = http_group(scope["path"])
            check = self.checks.get(group) if group is not None else None
            if check is not None and check[0] not in scope["headers"]:
                close = [(b"connection", b"close")] if scope["method"] != "GET" else []
                return await send_error(send, 403, check[1], close)
        await self.app(scope, receive, send)
