"""Sample inputs of a version for its load tests: upload (a KServe v2 JSON request, or one .npy
file per input, checked against the version's config) and delete. Deployers only."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from console.views import reads
from console.views.access import ROLE_DEPLOYER, role_required
from console.views.feedback import report_outcome
from repository.tuning.samples import sample_input_add, sample_input_delete
from repository.tuning.selectors import sample_input_get


def _back(name: str, number: int) -> str:
    return reverse("console:version-tuning", args=[name, number]) + "#sample-inputs"


@role_required(ROLE_DEPLOYER)
@require_POST
def sample_input_upload(request: HttpRequest, name: str, number: int) -> HttpResponse:
    version = reads.version_get(name=name, number=number)
    files = request.FILES.getlist("files")
    limit = int(settings.PORTICO_SAMPLE_INPUT_MAX_BYTES)
    # Refused on the sizes the upload declares, before anything is read into memory.
    if sum(f.size or 0 for f in files) > limit:
        messages.error(request, f"Sample inputs may hold at most {limit} bytes per upload.")
        return redirect(_back(name, number))

    def upload() -> str:
        sample = sample_input_add(
            version=version,
            actor=request.user,
            files=[(f.name or "", f.read()) for f in files],
        )
        return f"Sample input “{sample.name}” ({sample.shape_summary}) is kept for load tests."

    report_outcome(request, upload)
    return redirect(_back(name, number))


@role_required(ROLE_DEPLOYER)
@require_POST
def sample_input_remove(
    request: HttpRequest, name: str, number: int, sample_id: int
) -> HttpResponse:
    version = reads.version_get(name=name, number=number)
    sample = sample_input_get(version=version, sample_id=sample_id)
    if sample is None:
        raise Http404(f"no sample input {sample_id} of {name} v{number}")
    sample_input_delete(sample=sample, actor=request.user)
    messages.success(request, f"Sample input “{sample.name}” is deleted.")
    return redirect(_back(name, number))
