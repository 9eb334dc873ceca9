"""Stop work whose client has gone away: a request still queued need not run for nobody."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeVar

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before its answer was ready; nothing is sent."""


async def until_disconnect(work: Awaitable[T], receive: Receive) -> T:
    """Await ``work``, cancelled if the client disconnects first (then ClientDisconnected).

    NOTE: once the body is read, the ASGI server answers ``receive()`` only when the client
    disconnects. Cancelling the work then lets the scheduler drop a still-queued request
    (counted CANCELED) instead of running it for nobody, and ends a stream the model is still
    sending on; a batch already executing is unharmed. One small task per request watches.
    """
    task = asyncio.current_task()
    assert task is not None
    watcher = asyncio.ensure_future(receive())

    def cancel_on_disconnect(done: asyncio.Future[Message]) -> None:
        gone = not done.cancelled() and done.exception() is None
        if gone and done.result().get("type") == "http.disconnect":
            task.cancel()

    watcher.add_done_callback(cancel_on_disconnect)
    try:
        return await work
    except asyncio.CancelledError:
        if watcher.done() and not watcher.cancelled() and task.uncancel() == 0:
            raise ClientDisconnected from None
        raise
    finally:
        watcher.cancel()
