"""Serving replicas, from their heartbeats: address, uptime, last heartbeat, what they loaded."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.views import reads
from console.views.access import ROLE_VIEWER, role_required


@role_required(ROLE_VIEWER)
def replica_list(request: HttpRequest) -> HttpResponse:
    rows = [{"replica": r, "live": reads.replica_is_live(replica=r)} for r in reads.replica_list()]
    return render(
        request,
        "console/replica_list.html",
        {
            "nav": "replicas",
            "rows": rows,
            "live_count": sum(1 for r in rows if r["live"]),
            "live_age_s": int(reads.LIVE_REPLICA_AGE_S),
        },
    )
