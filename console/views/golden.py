"""Golden requests: record one from JSON inputs (run on a chosen version), delete one."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from console.forms import GoldenRecordForm
from console.views import reads
from console.views.access import ROLE_DEPLOYER, role_required
from console.views.feedback import report_outcome, safe_next
from repository.services import golden_request_delete, golden_request_record


@role_required(ROLE_DEPLOYER)
@require_POST
def golden_record(request: HttpRequest, name: str) -> HttpResponse:
    model = reads.model_get(name=name)
    form = GoldenRecordForm(request.POST)
    back = safe_next(request, reverse("console:model-detail", args=[name]))
    if not form.is_valid():
        errors = "; ".join(f"{field}: {' '.join(errs)}" for field, errs in form.errors.items())
        messages.error(request, f"The golden request was not recorded — {errors}")
        return redirect(back)
    data = form.cleaned_data
    version = reads.version_get(name=name, number=data["version"])

    def record() -> str:
        golden = golden_request_record(
            model=model,
            name=data["name"],
            inputs=json.loads(data["inputs"])["inputs"],
            version=version,
            rtol=data["rtol"],
            atol=data["atol"],
            actor=request.user,
        )
        return (
            f"Golden request “{golden.name}” is being recorded on "
            f"v{version.number}; its expected outputs appear when it finishes."
        )

    report_outcome(request, record)
    return redirect(back)


@role_required(ROLE_DEPLOYER)
@require_POST
def golden_delete(request: HttpRequest, name: str, golden_id: int) -> HttpResponse:
    model = reads.model_get(name=name)
    golden = reads.golden_get(model=model, golden_id=golden_id)

    def delete() -> str:
        golden_request_delete(golden=golden, actor=request.user)
        return f"Golden request “{golden.name}” is deleted."

    report_outcome(request, delete)
    return redirect(safe_next(request, reverse("console:model-detail", args=[name])))
