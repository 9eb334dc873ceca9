"""A request id per HTTP request: in the ``X-Request-ID`` answer header, on every log line
written while the request runs, and on the 500 page or JSON, so a user can quote it and an
operator can find the traceback that the answer itself never carries."""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

HEADER = "X-Request-ID"
NO_REQUEST = "-"
_current: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default=NO_REQUEST)


def request_id_current() -> str:
    """The id of the request being handled in this context (``"-"`` outside one)."""
    return _current.get()


class RequestIdMiddleware:
    """Gives each request a fresh id (``request.id``) and answers with it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # NOTE: never taken from the client: an id it chose could point at someone else's error.
        request_id = uuid.uuid4().hex
        request.id = request_id  # type: ignore[attr-defined]
        token = _current.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            _current.reset(token)
        response[HEADER] = request_id
        return response


class RequestIdLogFilter(logging.Filter):
    """Adds ``request_id`` to every record (the log format names it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            # django.request logs its answers after the middleware has returned; their records
            # carry the request itself.
            request = getattr(record, "request", None)
            record.request_id = getattr(request, "id", None) or _current.get()
        return True
