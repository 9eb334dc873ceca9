"""What a gRPC front-end process and the serving process say over their Unix socket, in the
frames of ``serving.protocol.relay_frames`` (``call`` numbers the calls a front-end has in
flight, so many share the socket at once). Front-end to server:
``UNARY`` (a unary call: its header and its one request message), ``OPEN`` (a stream's header),
``MESSAGE`` (one streamed request), ``END`` (the client finished sending), ``CANCEL`` (the client
went away), ``DELIVERED`` (one streamed answer went on to the client). Server to front-end:
``MESSAGE`` (one response message) and ``STATUS`` (the call's end: code, details, trailing
metadata) and ``CREDIT`` (the servicer took one streamed request). ``READY`` (call 0) tells the
server a front-end listens.

Both directions of a stream are windowed, so that a client is held back by gRPC's flow control
as in-process: at most ``STREAM_WINDOW`` requests sent and not yet taken (``CREDIT``), and at
most ``STREAM_WINDOW`` answers sent and not yet delivered (``DELIVERED``). Without the second, a
client that sends and never reads would have every answer pile up in its front-end.

Headers and statuses are ``marshal``-encoded tuples of str, bytes, int and float: both ends are
this code base, and a client's bytes only ever become str/bytes values inside them.
"""

from __future__ import annotations

import marshal
from collections.abc import Sequence
from typing import Any

from serving.protocol.relay_frames import (
    FrameReader,
    FrameWriter,
    frame,
    split_unary,
    unary_payload,
)

# The frames are re-exported: both ends of the gRPC relay speak through this one module.
__all__ = [
    "CANCEL", "CREDIT", "DELIVERED", "END", "MESSAGE", "OPEN", "READY", "STATUS", "STREAM_WINDOW",
    "UNARY", "FrameReader", "FrameWriter", "Metadata", "decode_header", "decode_status",
    "encode_header", "encode_status", "frame", "split_unary", "unary_payload",
]  # fmt: skip

UNARY, OPEN, MESSAGE, END, CANCEL, STATUS, READY, CREDIT, DELIVERED = range(1, 10)
STREAM_WINDOW = 64

Metadata = tuple[tuple[str, str | bytes], ...]


def encode_header(method: str, metadata: Metadata, peer: str, timeout_s: float | None) -> bytes:
    return marshal.dumps((method, metadata, peer, -1.0 if timeout_s is None else timeout_s))


def decode_header(payload: bytes | memoryview) -> tuple[str, Metadata, str, float | None]:
    method, metadata, peer, timeout_s = marshal.loads(payload)
    return method, metadata, peer, None if timeout_s < 0 else timeout_s


def encode_status(code: int, details: str, trailing: Sequence[tuple[str, Any]]) -> bytes:
    return marshal.dumps((code, details, tuple((str(k), v) for k, v in trailing)))


def decode_status(payload: bytes | memoryview) -> tuple[int, str, Metadata]:
    code, details, trailing = marshal.loads(payload)
    return code, details, trailing
