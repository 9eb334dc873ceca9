"""A version's load-test and tuning page: the model's SLO, load tests, and tuning sweeps with a
live progress bar, a chart of throughput against latency per setting, and one-click apply.

The page is a shell over the management API (``/api/models/{name}/...``); ``tuning.js`` polls
the job it watches once a second.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.views import reads
from console.views.access import ROLE_VIEWER, role_context, role_required
from repository.tuning.errors import LoadTestNotAllowedError
from repository.tuning.selectors import load_test_list, sample_input_list, slo_get, tuning_list
from repository.tuning.services import slo_dict, tuning_sweep_cores, version_check_testable

RECENT_JOBS = 10


@role_required(ROLE_VIEWER)
def version_tuning(request: HttpRequest, name: str, number: int) -> HttpResponse:
    version = reads.version_get(name=name, number=number)
    slo = slo_get(model=version.model)
    try:
        version_check_testable(version)
        refused = ""
    except LoadTestNotAllowedError as exc:
        refused = exc.message
    tunings = list(tuning_list(version=version)[:RECENT_JOBS])
    context = {
        "nav": "models",
        "model": version.model,
        "version": version,
        "slo": slo,
        "slo_json": json.dumps(slo_dict(slo) if slo else None),
        "refused": refused,
        "load_tests": list(load_test_list(version=version)[:RECENT_JOBS]),
        "sample_inputs": list(sample_input_list(version=version)),
        "sample_max_bytes": settings.PORTICO_SAMPLE_INPUT_MAX_BYTES,
        "tunings": tunings,
        "watch": tunings[0].pk if tunings else "",
        "cores": tuning_sweep_cores()[0],
        **role_context(request),
    }
    return render(request, "console/version_tuning.html", context)
