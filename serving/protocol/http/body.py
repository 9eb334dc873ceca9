"""A request body as it arrives, gathered without a whole-body copy on the event loop.

A 64 MiB body comes in about a thousand chunks. Growing one ``bytearray`` with them reallocates it
dozens of times (each a copy of what came so far), and joining the chunks at the end is one more
copy of the whole: either held the event loop, and every health probe, for 100 ms and more on a
loaded machine. So:

- A body whose ``Content-Length`` is known goes into one buffer of that size once more than
  ``PREALLOCATE_AFTER`` bytes of it have come; each chunk is then copied once, into its place.
  Until then nothing is set aside for bytes that have not come, so a client that declares 64 MiB
  and sends a byte at a time costs a few bytes. The buffer is ``np.empty``: the kernel commits its
  pages as they are written, so resident memory follows the bytes received, not the declaration.
- A chunked body (no length) keeps its chunks as they are and joins them once complete; past
  ``PREALLOCATE_AFTER`` bytes the join runs on a worker thread (``bytes.join`` lets go of the GIL
  for large joins), so the loop keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio

import numpy as np

Body = bytes | bytearray | memoryview

PREALLOCATE_AFTER = 1024 * 1024  # also the size above which a join leaves the loop


class BodyBuffer:
    """The chunks of one request body; ``result`` is the whole body as one contiguous buffer."""

    def __init__(self, declared_length: int | None) -> None:
        self.declared_length = declared_length
        self.received = 0
        self._chunks: list[bytes] = []
        self._small = bytearray()
        self._view: memoryview | None = None  # the preallocated buffer, once there is one

    def add(self, chunk: bytes) -> None:
        end = self.received + len(chunk)
        if self._view is not None:
            # NOTE: the HTTP parser never passes more than Content-Length bytes on.
            self._view[self.received : end] = chunk
        elif self.declared_length is None:
            self._chunks.append(chunk)
        else:
            self._small += chunk
            if end > PREALLOCATE_AFTER:
                self._view = np.empty(self.declared_length, dtype=np.uint8).data
                self._view[:end] = self._small
                self._small = bytearray()
        self.received = end

    async def result(self) -> Body:
        if self._view is not None:
            return self._view[: self.received]
        if self.declared_length is not None:
            return self._small
        if self.received > PREALLOCATE_AFTER:
            return await asyncio.to_thread(b"".join, self._chunks)
        return b"".join(self._chunks)
