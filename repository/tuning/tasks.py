"""Celery tasks of the tuning domain: thin, idempotent (the claim locks the row and skips a
finished job or one alive elsewhere), acknowledged late so a lost worker's job comes again."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from repository.tuning.jobs import load_test_run, tuning_run
from repository.tuning.services import jobs_requeue_stale

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def run_load_test(job_id: int) -> str:
    job = load_test_run(job_id=job_id)
    return job.state if job is not None else "skipped"


@shared_task(acks_late=True, reject_on_worker_lost=True)
def run_tuning(job_id: int) -> str:
    job = tuning_run(job_id=job_id)
    return job.state if job is not None else "skipped"


@worker_ready.connect
def _requeue_abandoned_jobs(**_: Any) -> None:
    # A worker killed mid-run leaves its job "running" with a stale heartbeat; resume it.
    try:
        touched = jobs_requeue_stale()
    except Exception:  # noqa: BLE001 - a sweep must never stop the worker from starting
        logger.exception("could not re-queue abandoned load tests and tunings")
        return
    if touched:
        logger.warning("re-queued abandoned jobs %s", touched)
