"""Triton's numeric error codes (``pb_utils.TritonError``) and the server's ``ErrorCode``."""

from __future__ import annotations

from serving.errors import ErrorCode

ERROR_CODES = {
    0: ErrorCode.UNKNOWN,
    1: ErrorCode.INTERNAL,
    2: ErrorCode.NOT_FOUND,
    3: ErrorCode.INVALID_ARG,
    4: ErrorCode.UNAVAILABLE,
    5: ErrorCode.UNSUPPORTED,
    6: ErrorCode.ALREADY_EXISTS,
    7: ErrorCode.CANCELLED,
}
TRITON_CODES = {code: number for number, code in ERROR_CODES.items()}
