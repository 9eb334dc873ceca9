"""The in-flight cap over HTTP: an ASGI layer that refuses with 503 before the body is read."""

from __future__ import annotations

from typing import Any

from serving.protocol.admission import InFlightLimit
from serving.protocol.http.answers import Send, send_error
from serving.protocol.restricted import HEALTH, http_group


class InFlightMiddleware:
    """Counts every request but health checks against the replica's ``InFlightLimit``."""

    def __init__(self, app: Any, limit: InFlightLimit) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http" or _is_health(scope["path"]):
            await self.app(scope, receive, send)
            return
        if not self.limit.try_enter():
            # NOTE: the body stays unread, so the connection cannot be reused.
            headers = [(b"retry-after", b"1"), (b"connection", b"close")]
            await send_error(send, 503, self.limit.message, headers)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.limit.leave()


def _is_health(path: str) -> bool:
    # NOTE: the cheap prefix test first: this runs on every request.
    if not (path.startswith("/v2/health") or path.endswith("/ready")):
        return False
    return http_group(path) == HEALTH
