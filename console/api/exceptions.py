"""One error shape for the whole API: ``{"message", "code", "extra"}`` with a 4xx status.

Domain errors raised by ``repository`` services know nothing of HTTP; the table in
``console.api.errors`` gives their status. Bad input never surfaces as a 500.
"""

from __future__ import annotations

from typing import Any

from django.core import exceptions as django_exceptions
from django.http import Http404, HttpRequest, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from console.api.errors import domain_error_status


class RequestTooLarge(exceptions.APIException):
    """The request's form fields (not its files) are larger than Django accepts in memory."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request's form fields are too large."
    default_code = "request_too_large"


def error_body(message: str, code: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The API's error JSON."""
    return {"message": message, "code": code, "extra": extra or {}}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER``: DRF, Django and registry errors become the error JSON."""
    domain_status = domain_error_status(exc)
    if domain_status is not None:
        return _domain_response(exc, domain_status)
    exc = _as_api_exception(exc)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    response.data = _api_exception_body(exc)
    return response


def _as_api_exception(exc: Exception) -> Exception:
    if isinstance(exc, Http404 | django_exceptions.ObjectDoesNotExist):
        return exceptions.NotFound()
    if isinstance(exc, django_exceptions.PermissionDenied):
        return exceptions.PermissionDenied()
    if isinstance(exc, django_exceptions.ValidationError):
        return exceptions.ValidationError(list(exc.messages))
    if isinstance(exc, django_exceptions.RequestDataTooBig):
        return RequestTooLarge(str(exc) or RequestTooLarge.default_detail)
    if isinstance(exc, django_exceptions.SuspiciousOperation | django_exceptions.BadRequest):
        return exceptions.ParseError(str(exc) or "Bad request.")
    return exc


def _api_exception_body(exc: exceptions.APIException) -> dict[str, Any]:
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        return error_body(_first_problem(fields), "invalid", {"fields": fields})
    detail = exc.detail
    code = getattr(detail, "code", None) or exc.default_code
    extra: dict[str, Any] = {}
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        extra["retry_after_s"] = exc.wait
    return error_body(str(detail), str(code), extra)


def _domain_response(exc: Exception, status_code: int) -> Response:
    code = str(getattr(exc, "code", "") or type(exc).__name__)
    extra = _domain_extra(exc)
    return Response(error_body(str(exc) or code, code, extra), status=status_code)


def _domain_extra(exc: Exception) -> dict[str, Any]:
    extra = getattr(exc, "extra", None)
    if callable(extra):
        extra = extra()
    if isinstance(extra, dict):
        return extra
    problems = getattr(exc, "problems", None)
    return {"problems": list(problems)} if problems else {}


def _first_problem(fields: Any, prefix: str = "") -> str:
    """``"archive: This field is required."``: the first problem, naming its field."""
    if isinstance(fields, dict):
        for name, value in fields.items():
            where = name if name != "non_field_errors" else ""
            return _first_problem(
                value, f"{prefix}.{where}" if prefix and where else prefix or where
            )
    if isinstance(fields, list) and fields:
        return _first_problem(fields[0], prefix)
    return f"{prefix}: {fields}" if prefix else str(fields)


@csrf_exempt  # it changes nothing; a POST to a wrong path must get this JSON, not a CSRF page
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """JSON 404 for any path under ``/api/`` that no route matches (a missing trailing slash is
    pointed out rather than redirected: a redirect would drop a POST's body)."""
    extra: dict[str, Any] = {}
    message = f"No API route for {request.path}."
    if not request.path.endswith("/") and _is_api_route(request.path + "/"):
        extra["did_you_mean"] = request.path + "/"
        message += f" Did you mean {request.path}/ (with the trailing slash)?"
    return JsonResponse(error_body(message, "not_found", extra), status=status.HTTP_404_NOT_FOUND)


def _is_api_route(path: str) -> bool:
    try:
        return resolve(path).func is not api_not_found
    except Resolver404:
        return False
