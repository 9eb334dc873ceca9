"""“Try it”: the model page posts a KServe v2 JSON request here and this view forwards it to the
serving HTTP API (same origin for the browser: no CORS, no inference token in the page).

It acts with the signed-in user's rights: calling a model needs the deployer role (the role whose
tokens may call every model; viewers read but do not call), checked here, and the request then
carries the console's own inference key (``repository.console_key``), never a user's token.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_POST

from console.views import reads
from console.views.access import ROLE_DEPLOYER, role_required
from repository.console_key import console_authorization

TIMEOUT_S = 30.0
MAX_REQUEST_BYTES = 4 * 1024 * 1024


def serving_url() -> str:
    """The serving HTTP API: the configured one (a load balancer in front of the replicas), else
    the URL a live replica advertises in its heartbeat."""
    configured = str(settings.PORTICO_SERVING_HTTP_URL or "")
    if configured:
        return configured.rstrip("/")
    advertised = (r.http_url for r in reads.live_replicas() if r.http_url)
    return next(advertised, "").rstrip("/")


def _infer_path(name: str, version: Any) -> str:
    if version not in (None, ""):
        return f"/v2/models/{name}/versions/{int(version)}/infer"
    return f"/v2/models/{name}/infer"


@role_required(ROLE_DEPLOYER)
@require_POST
def model_try(request: HttpRequest, name: str) -> HttpResponse:
    reads.model_get(name=name)
    if len(request.body) > MAX_REQUEST_BYTES:
        return JsonResponse({"message": "the request is too large to try here"}, status=413)
    try:
        payload = json.loads(request.body)
        body = payload["request"]
        if not isinstance(body, dict) or not isinstance(body.get("inputs"), list):
            raise ValueError
        path = _infer_path(name, payload.get("version"))
    except (ValueError, KeyError, TypeError):
        return JsonResponse(
            {
                "message": 'send {"request": {"inputs": [...]}, "version": n?} '
                "with KServe v2 JSON inputs"
            },
            status=400,
        )
    base = serving_url()
    if not base:
        return JsonResponse({"message": "no serving replica is known"}, status=502)
    started = time.perf_counter()
    try:
        response = httpx.post(
            base + path, json=body, headers=console_authorization(), timeout=TIMEOUT_S
        )
    except httpx.HTTPError as error:
        return JsonResponse({"message": f"serving at {base} did not answer: {error}"}, status=502)
    latency_ms = (time.perf_counter() - started) * 1000
    try:
        answer = response.json()
    except ValueError:
        answer = {"error": response.text[:2000]}
    return JsonResponse(
        {
            "status": response.status_code,
            "latency_ms": round(latency_ms, 2),
            "url": base + path,
            "response": answer,
        }
    )
