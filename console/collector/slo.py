"""Where each model stands against its SLO, from the collector's rolling store: pure, no I/O.

Two windows, as the alert rules use: over the last hour a missed objective is *breached*; over
the last five minutes (the hour still within) it is *burning*; both within is *meeting*. A
window without traffic says nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from console.collector.rolling import RollingStore, Selection

SHORT_S = 5 * 60
LONG_S = 60 * 60


def slo_statuses(
    store: RollingStore,
    slos: Mapping[str, Mapping[str, Any]],
    *,
    bounds: Sequence[float],
    now: float,
) -> dict[str, dict[str, Any]]:
    """``{model: {"slo", "status", "short", "long"}}`` for every model that has an SLO."""
    out = {}
    for model, slo in slos.items():
        short = _window(store, model, slo, bounds=bounds, start=now - SHORT_S, now=now)
        long = _window(store, model, slo, bounds=bounds, start=now - LONG_S, now=now)
        out[model] = {"slo": dict(slo), "status": status(short, long), "short": short, "long": long}
    return out


def status(short: Mapping[str, Any], long: Mapping[str, Any]) -> str:
    if long["ok"] is False:
        return "breached"
    if short["ok"] is False:
        return "burning"
    if short["ok"] or long["ok"]:
        return "meeting"
    return "no traffic"


def _window(
    store: RollingStore,
    model: str,
    slo: Mapping[str, Any],
    *,
    bounds: Sequence[float],
    start: float,
    now: float,
) -> dict[str, Any]:
    summary = store.summarize(Selection(model, None, start, now), bounds=bounds)
    total = summary["requests"] + summary["failures"]
    if not total:
        return {"ok": None, "latency_ms": None, "error_rate": None, "requests": 0}
    key = "p99" if slo.get("percentile") == 99 else "p95"
    latency_us = summary["latency_us"]["request"].get(key)
    latency_ms = latency_us / 1000 if latency_us is not None else None
    error_rate = summary["failures"] / total
    ok = error_rate <= slo["max_error_rate"] and (
        latency_ms is None or latency_ms <= slo["latency_ms"]
    )
    return {"ok": ok, "latency_ms": latency_ms, "error_rate": error_rate, "requests": total}
