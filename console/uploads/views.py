"""Endpoints the upload page's script talks to (JSON in, JSON out, session auth + CSRF).

``POST   /uploads/sessions/``            ``{"path", "size"}`` → 201 ``{"id", "offset", ...}``
``GET    /uploads/sessions/<id>/``       → ``{"offset", "complete", ...}`` (resume point)
``PUT    /uploads/sessions/<id>/``       body = bytes from ``Upload-Offset`` → ``{"offset"}``;
                                          409 with the offset to resume from when it is wrong
``DELETE /uploads/sessions/<id>/``       forget a file
``POST   /uploads/config/``              ``{"model", "sessions"}`` → auto-completed ``config.pbtxt``
``POST   /uploads/finish/``              ``{"model", "sessions", "config"}`` → 201 the new version
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from console.uploads import assembly
from console.uploads.sessions import (
    UploadSessionError,
    upload_session_append,
    upload_session_discard,
    upload_session_get,
    upload_session_open,
)
from console.views.access import ROLE_DEPLOYER, role_required
from repository.errors import RegistryError

READ_BYTES = 256 * 1024


def _error(error: UploadSessionError) -> JsonResponse:
    body: dict[str, Any] = {"message": error.message}
    if error.offset is not None:
        body["offset"] = error.offset
    return JsonResponse(body, status=error.status)


def _json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        data = json.loads(request.body or b"{}")
    except ValueError as error:
        raise UploadSessionError("the request body is not JSON") from error
    if not isinstance(data, dict):
        raise UploadSessionError("the request body must be a JSON object")
    return data


def _body_chunks(request: HttpRequest) -> Iterator[bytes]:
    while chunk := request.read(READ_BYTES):
        yield chunk


@role_required(ROLE_DEPLOYER)
@require_http_methods(["POST"])
def session_create(request: HttpRequest) -> HttpResponse:
    try:
        data = _json_body(request)
        size = data.get("size")
        if not isinstance(size, int) or not isinstance(data.get("path"), str):
            raise UploadSessionError("send {'path': str, 'size': int}")
        session = upload_session_open(user_id=request.user.pk, path=data["path"], size=size)
    except UploadSessionError as error:
        return _error(error)
    return JsonResponse(session.as_json(), status=201)


@role_required(ROLE_DEPLOYER)
@require_http_methods(["GET", "PUT", "DELETE"])
def session_detail(request: HttpRequest, session_id: str) -> HttpResponse:
    try:
        session = upload_session_get(session_id=session_id, user_id=request.user.pk)
        if request.method == "DELETE":
            upload_session_discard(session)
            return JsonResponse({"id": session_id, "deleted": True})
        if request.method == "PUT":
            offset = int(request.headers.get("Upload-Offset", "-1"))
            upload_session_append(session, offset=offset, chunks=_body_chunks(request))
    except ValueError:
        return JsonResponse({"message": "Upload-Offset must be an integer"}, status=400)
    except UploadSessionError as error:
        return _error(error)
    return JsonResponse(session.as_json())


@role_required(ROLE_DEPLOYER)
@require_http_methods(["POST"])
def config_suggest(request: HttpRequest) -> HttpResponse:
    """The config auto-complete would produce for these files (prefills the editor)."""
    try:
        data = _json_body(request)
        text, fields = assembly.suggest_config(
            user_id=request.user.pk,
            model_name=str(data.get("model", "")),
            session_ids=list(data.get("sessions", [])),
        )
    except UploadSessionError as error:
        return _error(error)
    return JsonResponse({"config": text, "autocompleted_fields": fields})


@role_required(ROLE_DEPLOYER)
@require_http_methods(["POST"])
def finish(request: HttpRequest) -> HttpResponse:
    """Hand the complete files to the registry as one new version; validation starts."""
    try:
        data = _json_body(request)
        version = assembly.create_version(
            user=request.user,
            model_name=str(data.get("model", "")).strip(),
            session_ids=list(data.get("sessions", [])),
            config_text=str(data.get("config") or "").strip() or None,
        )
    except UploadSessionError as error:
        return _error(error)
    except RegistryError as error:
        return JsonResponse({"message": error.message, "code": error.code}, status=400)
    url = reverse("console:version-detail", args=[version.model.name, version.number])
    return JsonResponse(
        {
            "model": version.model.name,
            "version": version.number,
            "version_id": version.pk,
            "state": version.state,
            "url": url,
            "progress_url": reverse("console:version-progress", args=[version.pk]),
        },
        status=201,
    )
