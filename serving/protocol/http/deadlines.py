"""Timers a data-plane connection keeps: one per limit, set again rather than made per request.

A request's start only notes the time; a timer that fires checks the time noted and sets itself
again for what is left (or stays unset while there is nothing to time). A keep-alive connection
thus costs a timer every few tens of seconds, not two timer operations per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson


def request_timeout_answer(message: str) -> bytes:
    """A whole 408 answer in Triton's JSON error shape, written straight to the socket."""
    body = orjson.dumps({"error": message})
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )


class Deadline:
    """One timer on the loop that can be set again and again; ``callback`` runs when it fires.

    ``armed`` is a plain attribute, not a property: a connection reads it several times a request.
    """

    __slots__ = ("_loop", "_callback", "_timer", "armed")

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop, self._callback = loop, callback
        self._timer: asyncio.TimerHandle | None = None
        self.armed = False

    def arm(self, delay_s: float) -> None:
        self.disarm()
        self._timer = self._loop.call_later(delay_s, self._fire)
        self.armed = True

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self.armed = False

    def _fire(self) -> None:
        self._timer = None
        self.armed = False
        self._callback()
