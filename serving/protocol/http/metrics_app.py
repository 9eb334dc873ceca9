"""The metrics port: Prometheus text exposition at ``GET /metrics``.

Per-model series come from ``serving.observability.metrics`` and host gauges from
``serving.observability.system_metrics``; each is registered once, on first scrape.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from serving.core.server import InferenceServer
from serving.observability.metrics import AccessLike, generate_text

logger = logging.getLogger("serving.metrics")


class MetricsApp:
    """ASGI app of the metrics port."""

    def __init__(self, server: InferenceServer, access: AccessLike | None = None) -> None:
        self.server = server
        self.access = access
        self.registry: CollectorRegistry | None = None

    def _registry(self) -> CollectorRegistry:
        if self.registry is None:
            from serving.observability import metrics, system_metrics

            registry = CollectorRegistry(auto_describe=False)
            metrics.register(registry, self.server)
            metrics.register_admission(registry, self.server.request_bytes)
            metrics.register_unread_responses(registry, self.server.unread_responses)
            if self.access is not None:
                metrics.register_access(registry, self.access)
            system_metrics.register(registry)
            self.registry = registry
        return self.registry

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            status, body, content_type = 404, b"Not Found", b"text/plain"
        elif scope["method"] != "GET":
            status, body, content_type = 405, b"Method Not Allowed", b"text/plain"
        else:
            status, body = 200, generate_text(self._registry())
            content_type = CONTENT_TYPE_LATEST.encode()
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
