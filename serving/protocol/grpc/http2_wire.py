"""gRPC's own layer over HTTP/2 (grpc's PROTOCOL-HTTP2): what the request headers mean, how a
message is framed and compressed, and how the status travels in the trailers.

HTTP/2 itself (frames, HPACK, flow control, stream states) is the ``jh2`` library's; this module
is the part of gRPC that rides on it, kept free of I/O so each rule can be tested on its own.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

MESSAGE_PREFIX = struct.Struct(">BI")  # compressed flag, message length
PREFIX_BYTES = MESSAGE_PREFIX.size
COMPRESSED = 1
# gRPC status codes the listeners end calls with (grpc's numbering).
CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 1, 4, 8, 12, 13
UNAVAILABLE = 14

# Header names grpc reserves for itself: never handed to a servicer as invocation metadata.
RESERVED = frozenset((b"content-type", b"te", b"grpc-timeout", b"grpc-encoding",
                      b"grpc-accept-encoding", b"grpc-message-type", b"grpc-status",
                      b"grpc-message", b"grpc-status-details-bin", b"connection"))  # fmt: skip
# Message encodings a client may compress requests with (grpc's names); answers go uncompressed,
# which grpc lets a server do whatever the client accepts.
ENCODINGS = {b"identity": None, b"gzip": 16 + zlib.MAX_WBITS, b"deflate": zlib.MAX_WBITS}
ACCEPT_ENCODING = b"identity,deflate,gzip"
TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}

ANSWER_HEADERS = ((b":status", b"200"), (b"content-type", b"application/grpc"),
                  (b"grpc-accept-encoding", ACCEPT_ENCODING))  # fmt: skip
OK_TRAILERS = ((b"grpc-status", b"0"),)


class WireError(Exception):
    """A request that breaks gRPC's framing or headers: ``code`` is the gRPC status to end it
    with (grpc's numbering), ``message`` its details."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


# The request headers this layer reads; every other one is metadata or ignored.
READ_HEADERS = frozenset((b":path", b":method", b"content-type", b"grpc-timeout", b"grpc-encoding"))


def read_headers(headers: Iterable[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """The ``READ_HEADERS`` a request carries, by name."""
    return {name: value for name, value in headers if name in READ_HEADERS}


def is_grpc(found: dict[bytes, bytes]) -> bytes | None:
    """None for a gRPC request; else the HTTP status that refuses it, as grpc's servers answer:
    405 for a method other than POST, 415 for another content type."""
    if found.get(b":method", b"POST") != b"POST":
        return b"405"
    if not found.get(b"content-type", b"").startswith(b"application/grpc"):
        return b"415"
    return None


def call_settings(
    found: dict[bytes, bytes], headers: Iterable[tuple[bytes, bytes]]
) -> tuple[float | None, int | None, tuple[tuple[str, str | bytes], ...]]:
    """A call's deadline (seconds from now, or None), its messages' zlib window bits (None:
    uncompressed) and its invocation metadata; WireError ends the call."""
    timeout = found.get(b"grpc-timeout")
    encoding = found.get(b"grpc-encoding")
    try:
        return (
            None if timeout is None else parse_timeout(timeout),
            decompressor(None if encoding == b"identity" else encoding),
            metadata(headers),
        )
    except ValueError:  # a -bin value that is not base64
        raise WireError(INTERNAL, "Invalid request metadata") from None


def parse_timeout(value: bytes) -> float:
    """``grpc-timeout`` in seconds: at most eight digits and one unit (``100m``, ``5S``)."""
    digits, unit = value[:-1], value[-1:]
    if not digits.isdigit() or len(digits) > 8 or unit not in TIMEOUT_UNITS:
        raise WireError(INTERNAL, f"Invalid grpc-timeout header {value.decode('latin-1')!r}")
    return int(digits) * TIMEOUT_UNITS[unit]


def metadata(headers: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[str, str | bytes], ...]:
    """The invocation metadata a servicer sees: every header but pseudo-headers and grpc's own,
    ``-bin`` values base64-decoded to bytes (grpc sends them unpadded)."""
    items: list[tuple[str, str | bytes]] = []
    for name, value in headers:
        if name[:1] == b":" or name in RESERVED:
            continue
        key = name.decode("latin-1")
        if key.endswith("-bin"):
            items.append((key, base64.b64decode(value + b"=" * (-len(value) % 4))))
        else:
            items.append((key, value.decode("latin-1")))
    return tuple(items)


def decompressor(encoding: bytes | None) -> int | None:
    """The zlib window bits that undo ``grpc-encoding`` (None: identity)."""
    if encoding is None:
        return None
    if encoding not in ENCODINGS:
        name = encoding.decode("latin-1")
        raise WireError(UNIMPLEMENTED, f"Compression algorithm '{name}' is not supported")
    return ENCODINGS[encoding]


def inflate(data: bytes, wbits: int | None, limit: int) -> bytes:
    """A compressed message's bytes, refused once they pass ``limit``: a small compressed
    message must not become a large one in memory."""
    if wbits is None:
        raise WireError(INTERNAL, "A compressed message arrived without a grpc-encoding")
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise WireError(INTERNAL, f"Failed to decompress the message: {exc}") from None
    if len(out) > limit:
        raise WireError(
            RESOURCE_EXHAUSTED, f"Received message larger than max (more than {limit} bytes)"
        )
    return out


def take_messages(
    buffer: bytes | bytearray, limit: int, wbits: int | None, out: list[bytes] | Any
) -> int:
    """Append ``buffer``'s whole length-prefixed messages to ``out`` (inflated where flagged);
    returns the bytes they took. A prefix announcing more than ``limit`` is refused at once,
    before its message arrives."""
    size, pos = len(buffer), 0
    while size - pos >= PREFIX_BYTES:
        flag, length = MESSAGE_PREFIX.unpack_from(buffer, pos)
        if length > limit:
            raise WireError(
                RESOURCE_EXHAUSTED, f"Received message larger than max ({length} vs. {limit})"
            )
        end = pos + PREFIX_BYTES + length
        if end > size:
            break
        # One copy out of the buffer (a bytearray's slice would be a second).
        message = bytes(memoryview(buffer)[pos + PREFIX_BYTES : end])
        out.append(inflate(message, wbits, limit) if flag & COMPRESSED else message)
        pos = end
    return pos


def frame_message(payload: bytes) -> bytes:
    """One uncompressed length-prefixed message."""
    return MESSAGE_PREFIX.pack(0, len(payload)) + payload


def trailers(code: int, details: str, trailing: Sequence[tuple[str, Any]]) -> list[Any]:
    """The status trailers: ``grpc-status``, ``grpc-message`` percent-encoded as grpc requires
    (UTF-8, then every byte outside printable ASCII and ``%`` itself as ``%XX``), then the
    trailing metadata (``-bin`` values base64 without padding)."""
    out: list[Any] = [(b"grpc-status", str(code).encode())]
    if details:
        out.append((b"grpc-message", percent_encode(details)))
    for key, value in trailing:
        name = str(key).lower().encode("latin-1")
        if name.endswith(b"-bin"):
            raw = value if isinstance(value, bytes) else str(value).encode()
            out.append((name, base64.b64encode(raw).rstrip(b"=")))
        else:
            text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
            out.append((name, text.encode("latin-1", "replace")))
    return out


def percent_encode(text: str) -> bytes:
    raw = text.encode("utf-8")
    if all(0x20 <= byte <= 0x7E and byte != 0x25 for byte in raw):
        return raw
    return b"".join(
        bytes((byte,)) if 0x20 <= byte <= 0x7E and byte != 0x25 else b"%%%02X" % byte
        for byte in raw
    )
