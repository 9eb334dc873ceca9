"""The validation progress WebSocket: snapshot on connect, updates from group messages and from
polling the row (one code path), refusal without a role."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from console.routing import websocket_urlpatterns
from repository.models import ModelVersion
from repository.services.live import version_group_name
from tests.factories import ModelVersionFactory, UserFactory

# Pages and consumers read the same rows on SQLite as on PostgreSQL.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


@pytest.fixture(autouse=True)
def _close_thread_connections():  # type: ignore[no-untyped-def]
    """Connections opened in the async tests' worker threads are closed, not garbage-collected."""
    yield
    from django.db import connections

    connections.close_all()


def _communicator(version_id: int, user) -> WebsocketCommunicator:  # type: ignore[no-untyped-def]
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/versions/{version_id}/"
    )
    communicator.scope["user"] = user
    return communicator


@pytest.fixture
def validating():  # type: ignore[no-untyped-def]
    return ModelVersionFactory(state="validating", validation_steps=[])


async def test_steps_arrive_as_the_row_changes(validating):
    user = await database_sync_to_async(UserFactory)(username="watcher", role="viewer")
    communicator = _communicator(validating.pk, user)
    connected, _ = await communicator.connect()
    assert connected
    first = await communicator.receive_json_from(timeout=5)
    assert first["state"] == "validating" and first["steps"] == []

    step = {"name": "config", "status": "passed", "message": "ok", "duration_ms": 4}
    await database_sync_to_async(ModelVersion.objects.filter(pk=validating.pk).update)(
        validation_steps=[step]
    )
    layer = get_channel_layer()
    await layer.group_send(
        version_group_name(validating.pk),
        {"type": "version.progress", "steps": [step], "state": "validating"},
    )
    second = await communicator.receive_json_from(timeout=5)
    assert second["steps"] == [step]

    await database_sync_to_async(ModelVersion.objects.filter(pk=validating.pk).update)(
        state="failed", validation_error="load: not an ONNX model"
    )
    final = await communicator.receive_json_from(timeout=5)  # found by polling
    assert final["state"] == "failed" and final["error"] == "load: not an ONNX model"
    await communicator.disconnect()


async def test_a_user_without_a_role_is_refused(validating):
    user = await database_sync_to_async(UserFactory)(username="nobody")
    communicator = _communicator(validating.pk, user)
    connected, code = await communicator.connect()
    assert not connected and code == 4403


async def test_a_missing_version_says_so(validating):
    user = await database_sync_to_async(UserFactory)(username="watcher2", role="viewer")
    communicator = _communicator(999999, user)
    await communicator.connect()
    message = await communicator.receive_json_from(timeout=5)
    assert message == {"type": "version.missing", "version_id": 999999}
    await communicator.disconnect()
