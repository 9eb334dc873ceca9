"""The upload page. The page's script does the chunked upload through ``console.uploads``."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.views.access import ROLE_DEPLOYER, role_required

CHUNK_BYTES = 4 * 1024 * 1024


@role_required(ROLE_DEPLOYER)
def upload_page(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "console/upload_form.html",
        {
            "nav": "upload",
            "model_name": request.GET.get("model", ""),
            "chunk_bytes": CHUNK_BYTES,
            "max_bytes": int(settings.PORTICO_MAX_UPLOAD_BYTES),
        },
    )
