"""What a servicer and the edge see of a call served without grpc.aio (the relay's calls and the
HTTP/2 listener's): the part of ``grpc.aio.ServicerContext`` and ``grpc.HandlerCallDetails``
that Portico's handlers use."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import grpc

Metadata = tuple[tuple[str, str | bytes], ...]


class Metadatum(NamedTuple):
    key: str
    value: str | bytes


class CallContext:
    """The part of ``grpc.aio.ServicerContext`` the servicers and the edge use, for one call."""

    __slots__ = ("_raw_metadata", "_metadata", "_peer", "_deadline", "_cancelled", "code",
                 "details", "trailing")  # fmt: skip

    def __init__(self, metadata: Metadata, peer: str, timeout_s: float | None) -> None:
        self._raw_metadata = metadata
        self._metadata: tuple[Metadatum, ...] | None = None  # built when first asked for
        self._peer = peer
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._cancelled = False
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.trailing: tuple[tuple[str, Any], ...] = ()

    def invocation_metadata(self) -> tuple[Metadatum, ...]:
        if self._metadata is None:
            self._metadata = tuple(Metadatum(key, value) for key, value in self._raw_metadata)
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Sequence[Any] = ()
    ) -> None:
        self.code, self.details = code, details
        if trailing_metadata:
            self.trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def set_trailing_metadata(self, metadata: Sequence[Any]) -> None:
        self.trailing = tuple(metadata)

    def trailing_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self.trailing


class CallDetails:
    """What ``grpc.HandlerCallDetails`` carries, for the edge interceptor (the metadata only
    built when it looks)."""

    __slots__ = ("method", "_context")

    def __init__(self, method: str, context: CallContext) -> None:
        self.method, self._context = method, context

    @property
    def invocation_metadata(self) -> tuple[Metadatum, ...]:
        return self._context.invocation_metadata()
