"""Stop work whose client has gone away: a request still queued need not run for nobody."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any, TypeVar

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

T = TypeVar("T")

# The scope extension under which a listener that knows when a connection is lost puts the
# request's ``DisconnectWatch`` (the in-process listener's protocol and the front-end relay do).
DISCONNECT_EXTENSION = "portico.disconnect"


class ClientDisconnected(Exception):
    """The client closed the connection before its answer was ready; nothing is sent."""


class DisconnectWatch:
    """One request's end of its connection: ``lost()`` cancels the task awaiting its work.

    The listener calls ``lost()`` when the connection goes; ``until_lost`` is
    ``until_disconnect`` without a task of its own per request, which is most of what that costs.
    A listener that made the request's task sets ``task``, which spares asking asyncio for it.
    """

    __slots__ = ("disconnected", "task", "_waiting")

    def __init__(self) -> None:
        self.disconnected = False
        self.task: asyncio.Task[Any] | None = None
        self._waiting: asyncio.Task[Any] | None = None

    def lost(self) -> None:
        self.disconnected = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def until_lost(self, work: Awaitable[T]) -> T:
        if self.disconnected:
            if isinstance(work, Coroutine):
                work.close()  # never started: nothing to cancel
            raise ClientDisconnected
        task = self.task or asyncio.current_task()
        assert task is not None
        self._waiting = task
        try:
            return await work
        except asyncio.CancelledError:
            if self.disconnected and task.uncancel() == 0:
                raise ClientDisconnected from None
            raise
        finally:
            self._waiting = None


def attach_disconnect_watch(scope: MutableMapping[str, Any]) -> DisconnectWatch:
    """A new watch, put in ``scope``'s extensions for ``until_disconnect`` to find."""
    watch = DisconnectWatch()
    extensions = scope.get("extensions")
    if extensions is None:
        scope["extensions"] = {DISCONNECT_EXTENSION: watch}
    else:
        extensions[DISCONNECT_EXTENSION] = watch
    return watch


def until_disconnect(
    work: Awaitable[T], receive: Receive, scope: MutableMapping[str, Any]
) -> Awaitable[T]:
    """``work``, cancelled if the client disconnects first (then ClientDisconnected), to await.

    NOTE: cancelling the work lets the scheduler drop a still-queued request (counted CANCELED)
    instead of running it for nobody, and ends a stream the model is still sending on; a batch
    already executing is unharmed. Where the listener put a ``DisconnectWatch`` in the scope it
    tells; elsewhere (any other ASGI server) a small task per request waits on ``receive()``,
    which, once the body is read, an ASGI server answers only when the client disconnects.
    """
    extensions = scope.get("extensions")
    watch: DisconnectWatch | None = extensions.get(DISCONNECT_EXTENSION) if extensions else None
    if watch is not None:
        return watch.until_lost(work)  # NOTE: not awaited here: one coroutine less a request
    return _watching_receive(work, receive)


async def _watching_receive(work: Awaitable[T], receive: Receive) -> T:
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
