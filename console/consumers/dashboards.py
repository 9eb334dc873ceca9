"""``/ws/dashboards/``: the live dashboards' frames, one a second, for the fleet, model and compare
pages. ``?model=NAME`` narrows every frame to one model (with its per-replica and per-version
detail); without it the fleet gets every model's combined numbers only.

The first connection in a console process starts that process's collector. On connect the browser
gets a backfill (the last 15 minutes and the recent promote / rollback markers) so its charts are
full at once. It may send ``{"type": "compare", "a": {...}, "b": {...}}`` and gets the two
summaries back. Frames arrive through the ``dashboards`` group (Redis or in-memory layer); with the
in-memory layer the collector runs in this same process, so one code path serves both.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.collector.rolling import Selection
from console.collector.runner import ensure_collector, group_name
from console.permissions import ROLE_VIEWER, user_has_role


@database_sync_to_async
def _allowed(user: Any) -> bool:
    return user_has_role(user, ROLE_VIEWER)


def narrow_frame(frame: dict[str, Any], model: str | None) -> dict[str, Any]:
    """The frame a page needs: one model in full, or every model without per-replica detail."""
    if model is not None:
        models = {model: frame["models"][model]} if model in frame["models"] else {}
        markers = [m for m in frame.get("markers", []) if m["model"] == model]
        return {**frame, "models": models, "markers": markers}
    slim = {
        name: {k: v for k, v in entry.items() if k not in ("by_replica", "by_version")}
        for name, entry in frame["models"].items()
    }
    return {**frame, "models": slim}


def _selection(model: str, side: dict[str, Any]) -> Selection:
    version = side.get("version")
    return Selection(
        model=model,
        version=int(version) if version not in (None, "", "all") else None,
        start=float(side["start"]),
        end=float(side["end"]),
    )


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """Pushes ``{"type": "frame", ...}`` every second after one ``{"type": "backfill", ...}``."""

    async def connect(self) -> None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.model: str | None = (query.get("model") or [None])[0] or None
        if not await _allowed(self.scope.get("user")):
            await self.close(code=4403)
            return
        await self.accept()
        self.group = group_name()
        if self.channel_layer is not None:
            await self.channel_layer.group_add(self.group, self.channel_name)
        self.collector = ensure_collector()
        await self.send_json({"type": "backfill", **self.collector.backfill(self.model)})
        if self.collector.frame is not None:
            await self.send_json(
                {"type": "frame", **narrow_frame(self.collector.frame, self.model)}
            )

    async def disconnect(self, code: int) -> None:
        if self.channel_layer is not None and hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def dashboards_frame(self, event: dict[str, Any]) -> None:
        """Group message from the collector."""
        await self.send_json({"type": "frame", **narrow_frame(event["frame"], self.model)})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "compare":
            return
        try:
            model = str(content["model"])
            a, b = _selection(model, content["a"]), _selection(model, content["b"])
        except (KeyError, TypeError, ValueError) as exc:
            await self.send_json(
                {"type": "compare.error", "message": f"bad compare request: {exc}"}
            )
            return
        await self.send_json({"type": "compare", **self.collector.compare(a, b)})
