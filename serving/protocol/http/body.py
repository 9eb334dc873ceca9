"""A request body assembled as its chunks arrive.

With a declared ``Content-Length`` the body is one buffer of that size, each chunk copied into
place as it comes, so no single step copies the whole body (a 64 MiB join would hold the event
loop for about 100 ms on a loaded machine). A chunked body without a length keeps its chunks and
joins them once at the end.
"""

from __future__ import annotations

Body = bytes | bytearray


class BodyBuffer:
    """Chunks in, one contiguous body out; ``declared`` (0: unknown) sizes the buffer up front."""

    def __init__(self, declared: int) -> None:
        self._buffer = bytearray(declared) if declared else None
        self._chunks: list[bytes] = []
        self.size = 0

    def add(self, chunk: bytes) -> None:
        end = self.size + len(chunk)
        if self._buffer is not None and end <= len(self._buffer):
            self._buffer[self.size : end] = chunk
        else:
            self._spill()
            self._chunks.append(chunk)
        self.size = end

    def value(self) -> Body:
        if self._buffer is not None and self.size == len(self._buffer):
            return self._buffer
        self._spill()
        return b"".join(self._chunks)

    def _spill(self) -> None:
        """Fall back to chunks (a body that is not its declared length is refused later anyway)."""
        if self._buffer is not None:
            self._chunks = [bytes(self._buffer[: self.size])]
            self._buffer = None
