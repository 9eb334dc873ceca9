"""nginx's ``send_timeout`` for the data plane's own listeners (HTTP/1.1, and gRPC's ``h2``): a
client that takes none of what waits for it in a connection's write buffer, for
``--send-timeout-secs``, has its connection reset.

Why a reset: ``close()`` waits for the buffer to drain, so a client that never reads would keep
its answers, whatever their size, in this process for as long as it kept the socket open (a
48 MiB answer was still there, whole, after 75 s). An abort drops the transport's buffer; the
reset (``SO_LINGER`` 0, nginx's ``reset_timedout_connection``) drops what the kernel had taken
too, which it would otherwise go on offering to a client that reads nothing.

Only a client taking nothing at all is cut off: each time the timer finds the buffer smaller than
it was, the client's clock starts again, however slowly it reads. h2corn's listener has the same
limit in its own code (``h2_timeout_response_stall``, ``h2_timeout_write``).

Over TLS the watch sees nothing: asyncio's TLS layer encrypts what it is given at once and hands
it to the socket's transport, whose pauses reach the TLS layer, not the protocol. There the
keep-alive close and the TLS shutdown's timeout end the connection (90.7 s measured for an
unread 48 MiB answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from typing import Any

from serving.protocol.http.deadlines import Deadline

logger = logging.getLogger("serving.protocol")

_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends RST


def reset_connection(transport: Any) -> None:
    """Close ``transport`` with a TCP reset, dropping everything buffered for its client."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    transport.abort()


class WriteStall:
    """One connection's watch: ``pause``/``resume`` from its protocol's ``pause_writing`` and
    ``resume_writing``, ``stop`` once it is lost.

    One timer per stall, not per pause: a pause only notes the time and the buffer's size, and
    the ``Deadline``, when it fires, is set again for what is left."""

    __slots__ = ("_loop", "_transport", "_timeout_s", "_what", "_deadline", "_paused",
                 "_since_s", "_unsent")  # fmt: skip

    def __init__(
        self, loop: asyncio.AbstractEventLoop, transport: Any, timeout_s: float, what: str
    ) -> None:
        self._loop = loop
        self._transport = transport
        self._timeout_s = timeout_s
        self._what = what  # for the log: "the HTTP connection of 10.0.0.7:51234"
        self._deadline = Deadline(loop, self._fire)
        self._paused = False
        self._since_s = 0.0  # when the client last took some of what waits
        self._unsent = 0  # the buffer's size then

    def pause(self) -> None:
        self._paused = True
        self._since_s = self._loop.time()
        self._unsent = self._transport.get_write_buffer_size()
        if not self._deadline.armed:
            self._deadline.arm(self._timeout_s)

    def resume(self) -> None:
        self._paused = False  # NOTE: the timer stays; firing, it finds nothing to do

    def stop(self) -> None:
        self._paused = False
        self._deadline.disarm()

    def _fire(self) -> None:
        if not self._paused:
            return  # the buffer drained: the next pause sets the timer again
        unsent = self._transport.get_write_buffer_size()
        if unsent < self._unsent:  # the client took some: its clock starts again
            self._since_s = self._loop.time()
        self._unsent = unsent
        remaining_s = self._since_s + self._timeout_s - self._loop.time()
        if remaining_s > 0:
            self._deadline.arm(remaining_s)
            return
        logger.warning(
            "reset %s: it took none of its answers for %g s (--send-timeout-secs), "
            "%d bytes waiting", self._what, self._timeout_s, unsent,
        )  # fmt: skip
        self._paused = False
        reset_connection(self._transport)
