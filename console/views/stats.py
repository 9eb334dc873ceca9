"""Requests/s and p95 per model, from the dashboards' live collector when it runs in this process.

The collector belongs to the dashboards pages; the models list only borrows its latest frame.
``None`` means no stats are available (the page shows "—").
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

logger = logging.getLogger(__name__)

# Where the collector keeps its latest fleet frame: (module, function) tried in order.
SOURCES = (("console.collector.service", "latest_frame"), ("console.collector", "latest_frame"))


def _latest_frame() -> dict[str, Any] | None:
    for module_name, attr in SOURCES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        function = getattr(module, attr, None)
        if function is not None:
            frame = function()
            return frame if isinstance(frame, dict) else None
    return None


def model_stats() -> dict[str, dict[str, float | None]] | None:
    """``{model: {"rps", "p95_ms"}}`` over the last minute, or None without a collector."""
    try:
        frame = _latest_frame()
    except Exception:  # noqa: BLE001 - stats are decoration; the page must still render
        logger.warning("live stats unavailable", exc_info=True)
        return None
    if frame is None:
        return None
    result: dict[str, dict[str, float | None]] = {}
    for name, entry in (frame.get("models") or {}).items():
        window = entry.get("60s") or entry.get("window_60s") or entry
        result[name] = {
            "rps": _number(window.get("rps", window.get("request_rate"))),
            "p95_ms": _number((window.get("total") or {}).get("p95_ms", window.get("p95_ms"))),
        }
    return result


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
