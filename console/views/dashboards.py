"""The dashboard pages: fleet overview, one model's live dashboard, and compare.

The pages are shells; their numbers arrive over ``/ws/dashboards/`` (see
``console.consumers.dashboards``) and are charted in the browser with uPlot.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.views.access import ROLE_VIEWER, role_context, role_required
from repository.errors import ModelNotFoundError
from repository.selectors.catalog import model_get, model_list, model_version_list
from repository.tuning.selectors import load_test_list, tuning_list

MEASURED_ROWS = 20


@role_required(ROLE_VIEWER)
def dashboard_fleet(request: HttpRequest) -> HttpResponse:
    models = [
        {"name": m.name, "promoted": m.promoted_versions[0].number if m.promoted_versions else None}
        for m in model_list()
    ]
    context = {"nav": "dashboards", "models": models, **role_context(request)}
    return render(request, "console/dashboard_fleet.html", context)


@role_required(ROLE_VIEWER)
def dashboard_model(request: HttpRequest, name: str) -> HttpResponse:
    context = {"nav": "dashboards", **_model_context(name), **role_context(request)}
    return render(request, "console/dashboard_model.html", context)


@role_required(ROLE_VIEWER)
def dashboard_compare(request: HttpRequest, name: str) -> HttpResponse:
    context = {
        "nav": "dashboards",
        "sides": [("a", 10, 5), ("b", 5, 0)],  # default: the five minutes before vs the last five
        **_model_context(name),
        **_measured_context(name),
        **role_context(request),
    }
    return render(request, "console/dashboard_compare.html", context)


def _measured_context(name: str) -> dict[str, object]:
    """Load tests and tunings of every version, so measured results compare across versions."""
    try:
        model = model_get(name=name)
    except ModelNotFoundError:
        return {"load_tests": [], "tunings": []}
    finished = {"state": "succeeded"}
    return {
        "load_tests": list(load_test_list(model=model).filter(**finished)[:MEASURED_ROWS]),
        "tunings": list(tuning_list(model=model).filter(**finished)[:MEASURED_ROWS]),
    }


def _model_context(name: str) -> dict[str, object]:
    """The registry's view of the model, when it has one (a Triton folder's model may not)."""
    try:
        model = model_get(name=name)
    except ModelNotFoundError:  # served from a Triton folder, not registered: numbers still show
        return {"model_name": name, "versions": [], "promoted": None}
    versions = [{"number": v.number, "state": v.state} for v in model_version_list(model=model)]
    promoted = model.promoted_versions[0].number if model.promoted_versions else None
    return {"model_name": name, "versions": versions, "promoted": promoted}
