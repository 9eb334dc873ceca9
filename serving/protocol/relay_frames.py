"""The frames a front-end process and the serving process exchange over one Unix socket.

A frame is ``<length u32><call u64><kind u8>`` then ``length`` bytes of payload. ``call`` numbers
what a front-end has in flight, so many requests share the socket at once; ``kind`` means what
each protocol's wire module (``grpc.relay_wire``, ``http.relay_wire``) says it means. Frames sent
during one loop turn leave in one write, and every frame that arrived is handled per wake-up.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

HEAD = struct.Struct("<IQB")
MAX_PAYLOAD = 2**32 - 1
# Bytes a front-end has written to the serving process that it has not read yet: past the high
# mark the front-end reads no more request bytes from its clients (they wait in TCP's or HTTP/2's
# flow control) until the serving process is within the low one. Without it a front-end reads
# every client as fast as the network brings bytes and holds what the serving process has not
# taken (docs/serving.md, "Front-end processes").
HIGH_WATER = 16 << 20
LOW_WATER = 4 << 20


def frame(call: int, kind: int, payload: bytes | memoryview = b"") -> bytes:
    return HEAD.pack(len(payload), call, kind) + payload


def unary_payload(header: bytes, body: bytes | memoryview) -> bytes:
    """A header and a body in one payload: the header's length, the header, the body."""
    return len(header).to_bytes(4, "little") + header + body


def split_unary(payload: bytes) -> tuple[memoryview, memoryview]:
    size = int.from_bytes(payload[:4], "little")
    view = memoryview(payload)
    return view[4 : 4 + size], view[4 + size :]


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
        self._caught_up: asyncio.Future[None] | None = None  # pending while the other end is behind

    def hold_back(self, transport: asyncio.Transport) -> None:
        """Write to ``transport``, and have ``caught_up`` wait while more than ``HIGH_WATER``
        bytes are unread (the protocol passes on ``pause_writing`` and ``resume_writing``)."""
        self.transport = transport
        transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)

    def pause(self) -> None:
        if self._caught_up is None:
            self._caught_up = asyncio.get_running_loop().create_future()

    def resume(self) -> None:
        """Under the low mark again, or the socket is gone (then nothing will drain: whoever
        waits goes on and finds it gone)."""
        caught_up, self._caught_up = self._caught_up, None
        if caught_up is not None and not caught_up.done():
            caught_up.set_result(None)

    async def caught_up(self) -> None:
        """Returns once the other end has read what it was behind on (at once if it is not)."""
        while self._caught_up is not None:
            # NOTE: shielded: a caller cancelled while it waits must not cancel the others' wait.
            await asyncio.shield(self._caught_up)

    def send(self, data: bytes) -> None:
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None:
            self.transport.write(b"".join(out))
