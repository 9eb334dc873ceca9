"""``/ws/versions/<id>/``: a version's state and validation steps, live, for the upload and version
pages. Joins the group ``version-<id>`` the registry publishes progress to, and polls the row."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.permissions import ROLE_VIEWER, user_has_role
from repository.selectors import model_version_get_by_id
from repository.services.live import version_group_name, version_progress_message

POLL_INTERVAL_S = 1.0
# After these states the report no longer changes (a ready version can still move; its steps can't).
FINAL_STATES = frozenset({"ready", "failed", "promoted", "retired"})


@database_sync_to_async
def _allowed(user: Any) -> bool:
    return user_has_role(user, ROLE_VIEWER)


@database_sync_to_async
def _snapshot(version_id: int) -> dict[str, Any] | None:
    version = model_version_get_by_id(version_id=version_id)
    return None if version is None else version_progress_message(version)


class VersionProgressConsumer(AsyncJsonWebsocketConsumer):
    """Sends ``{"type": "version.progress", "state", "steps", "error", ...}`` on every change."""

    async def connect(self) -> None:
        self.version_id = int(self.scope["url_route"]["kwargs"]["version_id"])
        self.group = version_group_name(self.version_id)
        self.last_sent: dict[str, Any] | None = None
        if not await _allowed(self.scope.get("user")):
            await self.close(code=4403)
            return
        await self.accept()
        if self.channel_layer is not None:
            await self.channel_layer.group_add(self.group, self.channel_name)
        self.poller = asyncio.create_task(self._poll())

    async def disconnect(self, code: int) -> None:
        poller = getattr(self, "poller", None)
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        if self.channel_layer is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def version_progress(self, event: dict[str, Any]) -> None:
        """Group message from the registry: re-read the row (the message may precede its commit)."""
        await self.push(event)

    # Older name for the same message, in case a publisher uses it.
    validation_step = version_progress

    async def push(self, hint: dict[str, Any] | None = None) -> bool:
        """Send the version's current progress if it changed; True once it is final."""
        snapshot = await _snapshot(self.version_id)
        if snapshot is None:
            await self.send_json({"type": "version.missing", "version_id": self.version_id})
            return True
        if hint and hint.get("steps") and len(hint["steps"]) > len(snapshot["steps"]):
            snapshot = {
                **snapshot,
                **{k: hint[k] for k in ("state", "steps", "error") if k in hint},
            }
        if snapshot != self.last_sent:
            self.last_sent = snapshot
            await self.send_json(snapshot)
        return snapshot["state"] in FINAL_STATES

    async def _poll(self) -> None:
        while not await self.push():
            await asyncio.sleep(POLL_INTERVAL_S)
