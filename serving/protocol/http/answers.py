"""Answers the HTTP layers in front of the application send themselves: Triton's JSON error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

Send = Callable[[dict[str, Any]], Awaitable[None]]


async def send_error(
    send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """``{"error": message}`` with ``status``; the request body, if any, is left unread."""
    body = orjson.dumps({"error": message})
    out = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": out + (headers or [])})
    await send({"type": "http.response.body", "body": body})
