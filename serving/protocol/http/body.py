"""What a request body is once read: ``bytes`` when it came in one piece, else a ``bytearray``
that grew chunk by chunk.

Growing in place (CPython over-allocates, and glibc moves large blocks with ``mremap`` rather than
copying) means no single step copies the whole body: joining 64 MiB of chunks at the end held the
event loop, and health probes, for about 100 ms on a loaded machine. Nothing is allocated ahead of
the bytes that arrived, so a declared ``Content-Length`` costs nothing until it is sent.
"""

from __future__ import annotations

Body = bytes | bytearray
