"""Unexpected failures as incidents: the details go to the log under an id, the client gets only
the id.

An exception that is not a ``ServingError`` is a fault of the server (or of a library under it);
its text can name files, addresses or internals, so it never reaches the client. The client's
500 / INTERNAL answer says ``Internal server error (request id <id>)`` and the log line with the
traceback carries the same id.
"""

from __future__ import annotations

import logging
import uuid

from serving.errors import InternalError


class IncidentError(InternalError):
    """What the client is told about an unexpected failure: only its request id."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"Internal server error (request id {request_id})")
        self.request_id = request_id


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


def report_incident(
    exc: BaseException, *, logger: logging.Logger, where: str, request_id: str = ""
) -> IncidentError:
    """Log ``exc`` with its traceback under a request id; the error to send the client instead."""
    request_id = request_id or new_request_id()
    logger.error("request %s: unexpected error %s", request_id, where, exc_info=exc)
    return IncidentError(request_id)
