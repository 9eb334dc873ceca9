"""Live progress for browsers: small messages to the Channels group ``version-<id>``.

Best effort: a failure is logged and swallowed, because the console falls back to polling the row.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from repository.models import ModelVersion

logger = logging.getLogger(__name__)

# The consumer method that receives these is ``version_progress`` (Channels maps "." to "_").
PROGRESS_MESSAGE_TYPE = "version.progress"


def version_group_name(version_id: int) -> str:
    return f"version-{version_id}"


def version_progress_message(version: ModelVersion) -> dict[str, Any]:
    return {
        "type": PROGRESS_MESSAGE_TYPE,
        "version_id": version.pk,
        "model": version.model.name,
        "version": version.number,
        "state": version.state,
        "steps": version.validation_steps,
        "error": version.validation_error,
    }


def version_progress_publish(version: ModelVersion) -> None:
    """Send the version's state and report to whoever watches it (never raises)."""
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        async_to_sync(layer.group_send)(
            version_group_name(version.pk), version_progress_message(version)
        )
    except Exception:  # noqa: BLE001 - progress is best effort; the console polls too
        logger.warning("could not publish progress of version %s", version.pk, exc_info=True)
