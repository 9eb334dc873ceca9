"""Why a request was refused before it reached the server. The edges map ``code`` to a status."""

from __future__ import annotations

import enum


class AccessCode(enum.Enum):
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"


class AccessError(Exception):
    """A refused request: ``reason`` labels the rejection metric, ``retry_after_s`` is set for
    quota answers."""

    code = AccessCode.UNAUTHENTICATED

    def __init__(self, message: str, *, reason: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.retry_after_s = retry_after_s


class UnauthenticatedError(AccessError):
    code = AccessCode.UNAUTHENTICATED


class PermissionDeniedError(AccessError):
    code = AccessCode.PERMISSION_DENIED


class QuotaExceededError(AccessError):
    code = AccessCode.QUOTA_EXCEEDED
