"""Validation progress reaches the Channels group ``version-<id>``; failures never propagate."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from repository.services.live import (
    PROGRESS_MESSAGE_TYPE,
    version_group_name,
    version_progress_publish,
)
from tests.factories import ModelVersionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_progress_is_sent_to_the_versions_group() -> None:
    version = ModelVersionFactory(validation_steps=[{"name": "parse", "status": "passed"}])
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(version_group_name(version.pk), channel)
    try:
        version_progress_publish(version)
        message = async_to_sync(layer.receive)(channel)
    finally:
        async_to_sync(layer.group_discard)(version_group_name(version.pk), channel)
    assert message["type"] == PROGRESS_MESSAGE_TYPE
    assert (message["version_id"], message["state"]) == (version.pk, version.state)
    assert message["steps"] == version.validation_steps


def test_a_broken_channel_layer_is_logged_not_raised(settings, caplog) -> None:  # type: ignore[no-untyped-def]
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "no.such.Layer"}}
    from channels.layers import channel_layers

    channel_layers.backends.pop("default", None)
    try:
        version_progress_publish(ModelVersionFactory())
    finally:
        channel_layers.backends.pop("default", None)
    assert "could not publish progress" in caplog.text
