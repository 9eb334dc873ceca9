"""Request decompression and response compression for HTTP infer (PROTOCOL.md §1.6)."""

from __future__ import annotations

import zlib

from serving.errors import InvalidArgumentError, UnsupportedError
from serving.protocol.http.body import Body

_GZIP_WBITS = 31
_ZLIB_WBITS = 15


def decompress(body: Body, encoding: bytes | None, *, max_bytes: int) -> Body:
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


def compress(body: bytes, encoding: bytes) -> bytes | None:
    """The compressed body, or None to send identity (compression failures are silent)."""
    try:
        if encoding == b"gzip":
            compressor = zlib.compressobj(wbits=_GZIP_WBITS)
        else:
            compressor = zlib.compressobj(wbits=_ZLIB_WBITS)
        return compressor.compress(body) + compressor.flush()
    except zlib.error:
        return None
