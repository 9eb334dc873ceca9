"""What an HTTP front-end process and the serving process say over their Unix socket, in the
frames of ``serving.protocol.relay_frames`` (``call`` numbers the requests a front-end has in
flight).

Front-end to server: ``REQUEST`` (a request's head and the body as far as it came with the head:
nearly always all of it), then, for a body that came in pieces, ``REQUEST_BODY`` (a piece, more to
follow) and ``REQUEST_END`` (the last piece); ``DISCONNECT`` (the client went away), ``DELIVERED``
(one ``BODY`` piece went on to the client) and ``READY`` (call 0: the front-end listens). The body
is relayed as it arrives, not gathered first, so the serving process refuses a request (a token,
the in-flight cap, the size cap) before its body is read, as in-process; a client's slow body is
timed out by the front-end (the same ``connection`` protocol). Server to front-end: ``START``
(status and headers), ``BODY`` (a piece of the response body, more to follow: a stream), ``END``
(the last piece). At most ``STREAM_WINDOW`` ``BODY`` pieces of one answer are sent and not yet
delivered, so a streamed answer (``generate_stream``) waits for its client as in-process; without
it, a client that stops reading would have every piece the model sends pile up in its front-end.

Heads are ``marshal``-encoded tuples of str, bytes and int: both ends are this code base, and a
client's bytes only ever become str/bytes values inside them.
"""

from __future__ import annotations

import marshal
from typing import Any, NamedTuple

from serving.protocol.relay_frames import (
    FrameReader,
    FrameWriter,
    frame,
    split_unary,
    unary_payload,
)

REQUEST, REQUEST_BODY, REQUEST_END, DISCONNECT, READY, START, BODY, END, DELIVERED = range(1, 10)
STREAM_WINDOW = 64
# A key of an answer's last ``http.response.body`` message: the relay sends its ``END`` only once
# every ``BODY`` piece before it is ``DELIVERED`` (an answer counted in the budget until it has
# gone, ``app._send_pieces``); the in-process listener ignores it.
UNTIL_DELIVERED = "portico.until_delivered"

Headers = tuple[tuple[bytes, bytes], ...]

__all__ = [
    "BODY", "DELIVERED", "DISCONNECT", "END", "READY", "REQUEST", "REQUEST_BODY", "REQUEST_END",
    "START", "STREAM_WINDOW", "UNTIL_DELIVERED",
    "FrameReader", "FrameWriter",
    "Headers", "RequestHead", "decode_head", "decode_start", "encode_head", "encode_start",
    "frame", "split_unary", "unary_payload",
]  # fmt: skip


class RequestHead(NamedTuple):
    """The part of an ASGI HTTP scope that the client sent (what the serving side rebuilds)."""

    method: str
    path: str
    raw_path: bytes
    query_string: bytes
    headers: Headers
    client: tuple[str, int] | None
    server: tuple[str, int] | None
    scheme: str
    http_version: str
    more_body: bool  # REQUEST_BODY / REQUEST_END frames follow


def encode_head(scope: Any, *, more_body: bool) -> bytes:
    client, server = scope.get("client"), scope.get("server")
    return marshal.dumps((
        scope["method"], scope["path"], scope.get("raw_path") or b"",
        scope.get("query_string") or b"", tuple((bytes(k), bytes(v)) for k, v in scope["headers"]),
        tuple(client) if client else None, tuple(server) if server else None,
        scope.get("scheme", "http"), scope.get("http_version", "1.1"), more_body,
    ))  # fmt: skip


def decode_head(payload: bytes | memoryview) -> RequestHead:
    return RequestHead(*marshal.loads(payload))


def encode_start(status: int, headers: Any) -> bytes:
    return marshal.dumps((status, tuple((bytes(k), bytes(v)) for k, v in headers)))


def decode_start(payload: bytes | memoryview) -> tuple[int, Headers]:
    status, headers = marshal.loads(payload)
    return status, headers
