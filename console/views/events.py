"""The audit log: every upload, validation result, promote, rollback, approval and token change."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.forms import EventFilterForm
from console.views import reads
from console.views.access import ROLE_VIEWER, role_required
from console.views.paging import paginate

PAGE_SIZE = 50


@role_required(ROLE_VIEWER)
def event_list(request: HttpRequest) -> HttpResponse:
    form = EventFilterForm(request.GET)
    filters = form.cleaned_data if form.is_valid() else {}
    filters = {k: (v or "").strip() for k, v in filters.items()}
    events = reads.event_list(**filters)
    page, query = paginate(request, events, per_page=PAGE_SIZE)
    return render(
        request,
        "console/event_list.html",
        {
            "nav": "events",
            "page": page,
            "events": page.object_list,
            "filters": filters,
            "choices": reads.event_filter_choices(),
            "query": query,
        },
    )
