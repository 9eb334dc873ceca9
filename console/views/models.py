"""The models list, a model's page, and its live "serving" panel (polled by htmx)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.views import reads, stats
from console.views.access import ROLE_VIEWER, role_required
from console.views.configs import parse_config, sample_request_text
from console.views.paging import paginate

SORTS = {
    "name": lambda r: r["model"].name.lower(),
    "backend": lambda r: r["backend"] or "~",
    "promoted": lambda r: r["promoted"].number if r["promoted"] else 0,
    "replicas": lambda r: r["replicas_live"],
    "rps": lambda r: r["rps"] if r["rps"] is not None else -1.0,
    "p95": lambda r: r["p95_ms"] if r["p95_ms"] is not None else -1.0,
    "event": lambda r: r["last_event"].created_at.timestamp() if r["last_event"] else 0.0,
}
PAGE_SIZE = 50


@role_required(ROLE_VIEWER)
def model_list(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    sort = request.GET.get("sort", "name")
    key = sort.lstrip("-")
    live = reads.live_replicas()
    model_stats = stats.model_stats()
    ready = reads.replicas_ready(live)
    slos = reads.slos_by_model()
    rows = [_row(model, ready, model_stats, slos) for model in reads.model_list(query=query)]
    if key in SORTS:
        rows.sort(key=SORTS[key], reverse=sort.startswith("-"))
    page, page_query = paginate(request, rows, per_page=PAGE_SIZE)
    return render(
        request,
        "console/model_list.html",
        {
            "nav": "models",
            "page": page,
            "rows": page.object_list,
            "q": query,
            "sort": sort,
            "query": page_query,
            "replicas_total": len(live),
            "stats_available": model_stats is not None,
            "any_slo": bool(slos),
        },
    )


def _row(
    model: Any,
    ready: Counter[tuple[str, int]],
    model_stats: dict[str, Any] | None,
    slos: dict[int, Any],
) -> dict[str, Any]:
    promoted = model.promoted_versions[0] if model.promoted_versions else None
    stat = (model_stats or {}).get(model.name, {})
    return {
        "model": model,
        "promoted": promoted,
        "backend": (promoted.backend if promoted else "") or model.backend or model.platform,
        "replicas_live": ready[(model.name, promoted.number)] if promoted else 0,
        "rps": stat.get("rps"),
        "p95_ms": stat.get("p95_ms"),
        "slo": slos.get(model.pk),
        "last_event": model.recent_events[0] if model.recent_events else None,
    }


@role_required(ROLE_VIEWER)
def model_detail(request: HttpRequest, name: str) -> HttpResponse:
    model = reads.model_get(name=name)
    versions = reads.model_versions(model=model)
    promoted = next((v for v in versions if v.state == "promoted"), None)
    context = {
        "nav": "models",
        "model": model,
        "versions": versions,
        "promoted": promoted,
        "actions": reads.versions_actions(versions=versions, user=request.user),
        "rollback_target": reads.rollback_target(promoted=promoted),
        "events": reads.event_list(model=model.name)[:10],
        "golden": reads.golden_list(model=model),
        "serving": _serving(model, promoted),
        "try_sample": _sample_json(promoted),
        "stats": (stats.model_stats() or {}).get(model.name),
    }
    return render(request, "console/model_detail.html", context)


def _sample_json(promoted: Any) -> str:
    return sample_request_text(parse_config(promoted.config_text) if promoted else None)


def _serving(model: Any, promoted: Any) -> list[dict[str, Any]]:
    """Each live replica and what it has loaded of this model (the switch-over, as it happens)."""
    rows = []
    for replica in reads.live_replicas():
        loaded = [v for v in replica.versions if v.get("model") == model.name]
        rows.append(
            {
                "replica": replica,
                "loaded": sorted(loaded, key=lambda v: int(v.get("version") or 0), reverse=True),
                "serves_promoted": promoted is not None
                and any(
                    int(v.get("version") or 0) == promoted.number and v.get("state") == "READY"
                    for v in loaded
                ),
            }
        )
    return rows


@role_required(ROLE_VIEWER)
def model_serving(request: HttpRequest, name: str) -> HttpResponse:
    """The serving panel alone; the model page re-fetches it every second."""
    model = reads.model_get(name=name)
    promoted = reads.promoted_version(model=model)
    return render(
        request,
        "console/partials/model_serving.html",
        {
            "model": model,
            "promoted": promoted,
            "serving": _serving(model, promoted),
        },
    )
