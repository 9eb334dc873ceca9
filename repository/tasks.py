"""Celery tasks: thin; they take ids and call services. Progress lives on the database rows."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from repository.services.golden import golden_request_record_run
from repository.services.validation import model_version_validate
from repository.tuning import tasks as tuning_tasks  # noqa: F401 - registers the tuning tasks
from repository.validation.pipeline import ValidationBusyError

logger = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def validate_version(self: Any, version_id: int) -> str:
    """Validate one version. Safe to run twice: a terminal version is a no-op; one being validated
    elsewhere is retried once that run could have finished (then taken over if it was abandoned)."""
    try:
        version = model_version_validate(version_id=version_id)
    except ValidationBusyError as exc:
        raise self.retry(countdown=max(5.0, exc.retry_after_s)) from exc
    return version.state if version is not None else "skipped"


@shared_task(acks_late=True, reject_on_worker_lost=True)
def record_golden_request(golden_id: int) -> str:
    """Run a golden request's inputs on its trusted version and store the outputs."""
    golden = golden_request_record_run(golden_id=golden_id)
    return golden.state if golden is not None else "skipped"
