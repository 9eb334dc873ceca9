"""The registry's periodic sweep, run by every Celery worker on its own timer.

Celery beat is not part of the embedded default (nor needed in a scaled-out stack): each worker
sweeps when it starts and then every ``PORTICO_SWEEP_INTERVAL_S``. A sweep re-queues validations
abandoned by a worker that died (a duplicate run is a no-op) and removes the rows of replicas that
stopped heartbeating. Any number of workers may sweep at once; each step is idempotent.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps
from django.conf import settings
from django.db import close_old_connections, connection

from repository.services.replicas import replicas_prune_stale
from repository.services.validation import model_versions_requeue_stale

logger = logging.getLogger(__name__)


def registry_sweep() -> None:
    """One sweep; a failure is logged and the next interval tries again."""
    close_old_connections()
    try:
        requeued = model_versions_requeue_stale()
        pruned = replicas_prune_stale(older_than_s=settings.PORTICO_REPLICA_PRUNE_AFTER_S)
    except Exception:  # noqa: BLE001 - a sweep must never stop the worker
        logger.exception("registry sweep failed")
        return
    finally:
        # NOTE: the sweep runs on the worker's timer thread; its connection must not outlive it.
        connection.close()
    if requeued:
        logger.warning("re-queued abandoned validations of versions %s", requeued)
    if pruned:
        logger.info("removed %d replicas not heard from: %s", len(pruned), ", ".join(pruned))


class RegistrySweepStep(bootsteps.StartStopStep):
    """A worker bootstep: sweep at start, then on the worker's own timer."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None

    def start(self, parent: Any) -> None:
        registry_sweep()
        self.tref = parent.timer.call_repeatedly(settings.PORTICO_SWEEP_INTERVAL_S, registry_sweep)

    def stop(self, parent: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
