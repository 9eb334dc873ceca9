"""The validation report of a version: steps stored on its row as they finish, pushed live."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from repository.models import ModelVersion, VersionState
from repository.services.live import version_progress_publish

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
MAX_NAME_CHARS = 64
MAX_MESSAGE_CHARS = 4000


class StepFailed(Exception):
    """Raised inside ``StepRecorder.step`` to fail the step with a message."""


class StepRecorder:
    """Collects ``{"name", "status", "message", "duration_ms"}`` steps; saves each as it lands."""

    def __init__(self, version: ModelVersion) -> None:
        self.version = version
        self.steps: list[dict[str, Any]] = []

    @property
    def failed_step(self) -> dict[str, Any] | None:
        return next((s for s in self.steps if s["status"] == FAILED), None)

    def add(self, step: dict[str, Any]) -> None:
        # NOTE: steps also come from the check child, i.e. from the model: bounded, plain values.
        self.steps.append(
            {
                "name": str(step.get("name", ""))[:MAX_NAME_CHARS],
                "status": str(step.get("status", ""))[:MAX_NAME_CHARS],
                "message": str(step.get("message", "") or "")[:MAX_MESSAGE_CHARS],
                "duration_ms": _duration(step.get("duration_ms")),
            }
        )
        self._save()

    @contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        """Time a step run here; ``StepFailed`` (or a returned message) becomes its outcome."""
        started = time.monotonic()
        result: dict[str, Any] = {"message": ""}
        try:
            yield result
        except StepFailed as exc:
            self.add(_step(name, FAILED, str(exc), started))
            raise
        self.add(_step(name, PASSED, result["message"], started))

    def _save(self) -> None:
        self.version.validation_steps = list(self.steps)
        ModelVersion.objects.filter(pk=self.version.pk, state=VersionState.VALIDATING).update(
            validation_steps=self.version.validation_steps
        )
        version_progress_publish(self.version)


def _step(name: str, status: str, message: str, started: float) -> dict[str, Any]:
    return {
        "name": name,
        "status": status,
        "message": message,
        "duration_ms": round((time.monotonic() - started) * 1000, 3),
    }


def _duration(value: object) -> float:
    try:
        return float(value or 0)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
