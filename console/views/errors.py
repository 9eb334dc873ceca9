"""The 500 answer: what went wrong stays in the log; the client gets the request id to quote."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader

from console.api.exceptions import error_body
from console.security.request_id import request_id_current

MESSAGE = "Something went wrong on the server; it has been logged."


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: JSON under ``/api/``, a page elsewhere; never the exception's text."""
    request_id = getattr(request, "id", None) or request_id_current()
    if request.path.startswith("/api/"):
        body = error_body(MESSAGE, "server_error", {"request_id": request_id})
        return JsonResponse(body, status=500)
    # NOTE: a plain template without the request context: the failure may be in what the
    # context processors or base.html need.
    page = loader.get_template("500.html").render({"request_id": request_id})
    return HttpResponse(page, status=500)
