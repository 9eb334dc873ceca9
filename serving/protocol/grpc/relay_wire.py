"""The framing between a gRPC front-end process and the serving process, over one Unix socket.

A frame is ``<length u32><call u64><kind u8>`` then ``length`` bytes of payload; ``call`` numbers
the calls a front-end has in flight, so many share the socket at once. Front-end to server:
``UNARY`` (a unary call: its header and its one request message), ``OPEN`` (a stream's header),
``MESSAGE`` (one streamed request), ``END`` (the client finished sending), ``CANCEL`` (the client
went away). Server to front-end: ``MESSAGE`` (one response message) and ``STATUS`` (the call's
end: code, details, trailing metadata) and ``CREDIT`` (the servicer took one streamed request: a
stream has at most ``STREAM_WINDOW`` requests sent and not yet taken, so a client that floods a
stream is held back by gRPC's flow control, as in-process). ``READY`` (call 0) tells the server a
front-end listens.

Headers and statuses are ``marshal``-encoded tuples of str, bytes, int and float: both ends are
this code base, and a client's bytes only ever become str/bytes values inside them.
"""

from __future__ import annotations

import asyncio
import marshal
import struct
from collections.abc import Callable, Sequence
from typing import Any

HEAD = struct.Struct("<IQB")
MAX_PAYLOAD = 2**32 - 1

UNARY, OPEN, MESSAGE, END, CANCEL, STATUS, READY, CREDIT = range(1, 9)
STREAM_WINDOW = 64

Metadata = tuple[tuple[str, str | bytes], ...]


def frame(call: int, kind: int, payload: bytes = b"") -> bytes:
    return HEAD.pack(len(payload), call, kind) + payload


def encode_header(method: str, metadata: Metadata, peer: str, timeout_s: float | None) -> bytes:
    return marshal.dumps((method, metadata, peer, -1.0 if timeout_s is None else timeout_s))


def decode_header(payload: bytes | memoryview) -> tuple[str, Metadata, str, float | None]:
    method, metadata, peer, timeout_s = marshal.loads(payload)
    return method, metadata, peer, None if timeout_s < 0 else timeout_s


def unary_payload(header: bytes, body: bytes) -> bytes:
    """A ``UNARY`` frame's payload: the header's length, the header, the request bytes."""
    return len(header).to_bytes(4, "little") + header + body


def split_unary(payload: bytes) -> tuple[memoryview, memoryview]:
    size = int.from_bytes(payload[:4], "little")
    view = memoryview(payload)
    return view[4 : 4 + size], view[4 + size :]


def encode_status(code: int, details: str, trailing: Sequence[tuple[str, Any]]) -> bytes:
    return marshal.dumps((code, details, tuple((str(k), v) for k, v in trailing)))


def decode_status(payload: bytes | memoryview) -> tuple[int, str, Metadata]:
    code, details, trailing = marshal.loads(payload)
    return code, details, trailing


class FrameReader:
    """Collects bytes from a socket and hands every complete frame to ``on_frame`` at once, so one
    wake-up serves as many frames as arrived."""

    def __init__(self, on_frame: Callable[[int, int, bytes], None]) -> None:
        self._buffer = bytearray()
        self._on_frame = on_frame

    def feed(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start, size = 0, len(buffer)
        head = HEAD.size
        with memoryview(buffer) as view:
            while size - start >= head:
                length, call, kind = HEAD.unpack_from(view, start)
                end = start + head + length
                if end > size:
                    break
                # NOTE: a copy: the handler may keep the payload while the buffer is reused.
                self._on_frame(call, kind, bytes(view[start + head : end]))
                start = end
        if start:
            del buffer[:start]


class FrameWriter:
    """Frames sent during one loop turn leave in one write, so the other end reads them in one
    wake-up."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._out: list[bytes] = []

    def send(self, data: bytes) -> None:
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None:
            self.transport.write(b"".join(out))
