"""Requests/s and p95 per model over the last minute, for the models list.

Borrowed from the dashboards' collector: its replica targets, its live-stats path and its fleet
aggregation (rates add, p95 from merged histograms). A page load asks each live replica once, with
a short timeout; ``None`` means no replica answered (the page shows "—").
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from console.collector.aggregate import ReplicaSample, aggregate_fleet
from console.collector.runner import LIVE_STATS_PATH
from console.collector.sources import live_replica_targets
from repository.console_key import console_authorization

logger = logging.getLogger(__name__)

WINDOW = "60"
FETCH_TIMEOUT_S = 0.5


def _samples() -> list[ReplicaSample]:
    samples = []
    with httpx.Client(timeout=FETCH_TIMEOUT_S, headers=console_authorization()) as client:
        for target in live_replica_targets():
            try:
                response = client.get(target.http_url + LIVE_STATS_PATH)
                response.raise_for_status()
                samples.append(ReplicaSample(target.replica_id, target.http_url, response.json()))
            except (httpx.HTTPError, ValueError):
                continue
    return samples


def model_stats() -> dict[str, dict[str, float | None]] | None:
    """``{model: {"rps", "p95_ms"}}`` over the last minute, or None when no replica answered."""
    try:
        samples = _samples()
        if not samples:
            return None
        frame = aggregate_fleet(samples, window=WINDOW)
    except Exception:  # noqa: BLE001 - stats decorate the page; it must render without them
        logger.warning("live stats unavailable", exc_info=True)
        return None
    result: dict[str, dict[str, float | None]] = {}
    for name, model in frame.get("models", {}).items():
        combined: dict[str, Any] = model.get("combined", {})
        p95_us = _number((combined.get("latency_us", {}).get("request") or {}).get("p95"))
        result[name] = {
            "rps": _number(combined.get("requests_per_s")),
            "p95_ms": p95_us / 1000 if p95_us is not None else None,
        }
    return result


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
