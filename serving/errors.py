"""Domain errors of the serving process.

Each error carries a stable ``code`` (Triton's status codes); the protocol edges map codes to HTTP
statuses and gRPC status codes in one table each. Messages keep Triton's wording where clients match
substrings (PROTOCOL.md §1.3).
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    INVALID_ARG = "INVALID_ARG"
    NOT_FOUND = "NOT_FOUND"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"


class ServingError(Exception):
    """Base of every error the data plane reports to a client."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value}: {self.message!r})"


class InvalidArgumentError(ServingError):
    code = ErrorCode.INVALID_ARG


class NotFoundError(ServingError):
    code = ErrorCode.NOT_FOUND


class UnavailableError(ServingError):
    code = ErrorCode.UNAVAILABLE


class OverloadedError(UnavailableError):
    """Refused for load the client may retry after a moment (HTTP adds ``Retry-After``)."""


class InternalError(ServingError):
    code = ErrorCode.INTERNAL


class UnsupportedError(ServingError):
    code = ErrorCode.UNSUPPORTED


class CancelledError(ServingError):
    code = ErrorCode.CANCELLED


class BackendContractError(InternalError):
    """A backend broke the contract: ``execute`` must return one result per request, in order."""
