"""Request decompression and response compression for HTTP infer (PROTOCOL.md §1.6).

zlib lets go of the GIL while it works, so a large body is (de)compressed on a worker thread and
the event loop keeps answering meanwhile; a small one is done in place, where a thread hand-over
would cost more than the work.
"""

from __future__ import annotations

import asyncio
import functools
import zlib
from collections.abc import Sequence

from serving.errors import InvalidArgumentError, UnsupportedError
from serving.protocol.http.body import PREALLOCATE_AFTER, Body

OFF_LOOP_BYTES = PREALLOCATE_AFTER

_GZIP_WBITS = 31
_ZLIB_WBITS = 15


async def decompress(body: Body, encoding: bytes | None, *, max_bytes: int) -> Body:
    """The decompressed body; its size is capped like an uncompressed one."""
    if encoding is None:
        return body
    name = encoding.strip().lower()
    if name in (b"", b"identity"):
        return body
    if name == b"gzip":
        wbits = _GZIP_WBITS
    elif name == b"deflate":
        wbits = _ZLIB_WBITS
    else:
        raise UnsupportedError("Unsupported compression type")
    if len(body) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(_inflate, body, wbits, max_bytes)
    return _inflate(body, wbits, max_bytes)


def _inflate(body: Body, wbits: int, max_bytes: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    try:
        data = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise InvalidArgumentError(f"failed to decompress the request body: {exc}") from None
    if len(data) > max_bytes or inflater.unconsumed_tail:
        raise InvalidArgumentError(
            f"decompressed request body exceeds the maximum input size of {max_bytes} bytes"
        )
    return data


# NOTE: clients send the same Accept-Encoding on every request (Python's http.client "identity",
# requests "gzip, deflate"), so its parse is remembered; the cache is bounded, so a client that
# varies it only evicts entries.
@functools.lru_cache(maxsize=64)
def choose_encoding(accept: bytes | None) -> bytes | None:
    """The highest-weighted of identity/gzip/deflate in Accept-Encoding; None means identity."""
    if not accept:
        return None
    best, best_q = b"identity", -1.0
    for part in accept.split(b","):
        fields = part.strip().split(b";")
        name = fields[0].strip().lower()
        if name not in (b"identity", b"gzip", b"deflate"):
            continue
        q = 1.0
        for field in fields[1:]:
            key, _, value = field.strip().partition(b"=")
            if key.strip() == b"q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > best_q:
            best, best_q = name, q
    return None if best == b"identity" or best_q <= 0 else best


async def compress(pieces: Sequence[bytes | memoryview], encoding: bytes) -> bytes | None:
    """The pieces of a body compressed as one, or None to send identity (compression failures
    are silent)."""
    if sum(len(piece) for piece in pieces) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(_deflate, pieces, encoding)
    return _deflate(pieces, encoding)


def _deflate(pieces: Sequence[bytes | memoryview], encoding: bytes) -> bytes | None:
    try:
        if encoding == b"gzip":
            compressor = zlib.compressobj(wbits=_GZIP_WBITS)
        else:
            compressor = zlib.compressobj(wbits=_ZLIB_WBITS)
        # NOTE: piece by piece: the pieces are never joined into one more copy of the body.
        return b"".join([*(compressor.compress(piece) for piece in pieces), compressor.flush()])
    except zlib.error:
        return None
