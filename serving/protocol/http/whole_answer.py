"""A small, complete answer in one write: status line, headers and body in one ``transport.write``.

uvicorn's ASGI ``send`` writes the status line and headers as soon as ``http.response.start``
arrives and the body on the next message: two system calls and two TCP segments an answer, each
message checked on the way. The in-process listener's protocol puts a ``WholeAnswer`` in each
request's scope; the infer path, whose answers are complete and mostly small, hands it the whole
answer at once. It does to the request's cycle what ``send`` would have done for those two
messages, and declines (returns False) wherever ``send`` must take the answer instead: the
answer has started, the client is gone, the socket's write buffer is full (``send`` waits for it
to drain), or the answer has no body by HTTP's rules (HEAD, 204, 304) or is chunked.

An HTTP front-end process hands it the answers the serving process relays back whole, so those
leave the front-end in one write as well.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)

# The scope extension under which the in-process listener's protocol puts the request's writer.
WHOLE_ANSWER_EXTENSION = "portico.whole_answer"
_CONNECTION_CLOSE = b"connection: close\r\n"
# Larger answers go through ``send`` in pieces: copying them into one write would cost more than
# the system call it saves.
WHOLE_ANSWER_BYTES = 64 * 1024
_NO_BODY_STATUSES = frozenset((204, 304))


class WholeAnswer:
    """One request's way to write its whole answer at once (see the module's docstring)."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle

    def write(self, status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> bool:
        """Write the answer and complete the cycle; False (nothing written) if ``send`` must.

        ``headers`` have lower-case names; a content-length among them is replaced by the body's
        own length, and ``connection: close`` closes the connection after the answer, as with
        ``send``.
        """
        cycle = self._cycle
        if (
            cycle.response_started
            or cycle.disconnected
            or cycle.flow.write_paused
            or status in _NO_BODY_STATUSES
            or cycle.scope["method"] == "HEAD"
        ):
            return False
        content = [STATUS_LINE[status]]
        asks_close = False
        for name, value in (*cycle.default_headers, *headers):
            if name == b"content-length":
                continue
            if name == b"transfer-encoding" or HEADER_VALUE_RE.search(value):
                return False  # ``send`` frames it, or refuses it as it would for any app
            if name == b"connection" and b"close" in value.lower():
                asks_close = True
            content += (name, b": ", value, b"\r\n")
        content += (b"content-length: ", str(len(body)).encode(), b"\r\n")
        if asks_close:
            cycle.keep_alive = False
        elif not cycle.keep_alive:
            content.append(_CONNECTION_CLOSE)
        content += (b"\r\n", body)
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        cycle.transport.write(b"".join(content))
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            cycle.transport.close()
        cycle.on_response()
        return True


def attach_whole_answer(scope: MutableMapping[str, Any], cycle: RequestResponseCycle) -> None:
    scope.setdefault("extensions", {})[WHOLE_ANSWER_EXTENSION] = WholeAnswer(cycle)


def whole_answer(scope: MutableMapping[str, Any]) -> WholeAnswer | None:
    """The request's writer, where its listener offers one (not behind a front-end relay)."""
    extensions = scope.get("extensions")
    return extensions.get(WHOLE_ANSWER_EXTENSION) if extensions else None
