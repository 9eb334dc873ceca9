"""A version's page: validation report, effective config (auto-completed fields marked), the diff
against the promoted version's config, inputs and outputs, golden requests."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from console.views import reads
from console.views.access import ROLE_VIEWER, role_required
from console.views.configs import (
    config_diff,
    config_lines,
    parse_config,
    sample_request_text,
    tensors,
)
from repository.services.gpu_checks import model_version_gpu_check_record
from repository.services.live import version_progress_message

FINAL_STATES = ("ready", "failed", "promoted", "retired")


@role_required(ROLE_VIEWER)
def version_detail(request: HttpRequest, name: str, number: int) -> HttpResponse:
    version = model_version_gpu_check_record(version=reads.version_get(name=name, number=number))
    promoted = reads.promoted_version(model=version.model)
    config_text = version.config_text or version.submitted_config_text
    inputs, outputs = tensors(parse_config(config_text))
    diff = []
    if promoted is not None and promoted.pk != version.pk:
        diff = config_diff(
            promoted.config_text,
            config_text,
            old_label=f"v{promoted.number} (promoted)",
            new_label=f"v{number}",
        )
    failed = next((s for s in version.validation_steps if s.get("status") == "failed"), None)
    return render(
        request,
        "console/version_detail.html",
        {
            "nav": "models",
            "model": version.model,
            "version": version,
            "promoted": promoted,
            "config_lines": config_lines(config_text, list(version.autocompleted_fields or [])),
            "config_is_submitted": not version.config_text,
            "diff": diff,
            "inputs": inputs,
            "outputs": outputs,
            "failed_step": failed,
            "live": version.state not in FINAL_STATES,
            "files": list(version.files.all()),
            "actions": reads.version_actions(version=version, user=request.user),
            "golden": reads.golden_list(model=version.model),
            "sample": sample_request_text(parse_config(config_text)),
        },
    )


@role_required(ROLE_VIEWER)
def version_progress(request: HttpRequest, version_id: int) -> HttpResponse:
    """The same snapshot the WebSocket sends, for a browser that cannot open one."""
    version = reads.version_by_id(version_id=version_id)
    return JsonResponse(version_progress_message(version))
