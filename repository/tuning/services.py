"""The tuning domain's writes: set an SLO, start, cancel and apply jobs, re-queue abandoned ones.

Keyword-only and transactional like every registry service; each records an audit event and
enqueues its task only once the transaction commits.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from repository.config.cpu_quota import usable_cpu_count
from repository.config.parse import parse_config_text
from repository.models import Event, LoadTest, Model, ModelVersion, Slo, Tuning, VersionState
from repository.services.events import event_record
from repository.services.versions import model_version_create_with_config
from repository.tuning import errors, pod_job
from repository.tuning.models import TERMINAL_JOB_STATES, Job, JobState
from repository.tuning.sweep import BATCHING_MODES, Setting, tuned_config_text

logger = logging.getLogger(__name__)

TESTABLE_STATES = (VersionState.READY, VersionState.PROMOTED, VersionState.RETIRED)
MAX_DURATION_S = 600.0
# A running job whose heartbeat is older than this lost its worker.
STALE_AFTER = datetime.timedelta(seconds=60)
MAX_ATTEMPTS = 3


def slo_set(
    *,
    model: Model,
    actor: Any,
    latency_ms: float,
    percentile: int = 95,
    max_error_rate: float = 0.001,
    expected_rate_per_s: float = 0.0,
) -> Slo:
    """Create or replace the model's SLO."""
    with transaction.atomic():
        slo, _ = Slo.objects.update_or_create(
            model=model,
            defaults={
                "latency_ms": latency_ms,
                "percentile": percentile,
                "max_error_rate": max_error_rate,
                "expected_rate_per_s": expected_rate_per_s,
                "updated_by": actor if actor is not None and actor.pk else None,
            },
        )
        event_record(actor=actor, action=Event.Action.SLO_SET, model=model, detail=slo_dict(slo))
    return slo


def slo_dict(slo: Slo) -> dict[str, Any]:
    return {
        "percentile": slo.percentile,
        "latency_ms": slo.latency_ms,
        "max_error_rate": slo.max_error_rate,
        "expected_rate_per_s": slo.expected_rate_per_s,
    }


def version_check_testable(version: ModelVersion) -> None:
    """Load tests run the version's own code in the worker, which is no sandbox for long runs."""
    name, number = version.model.name, version.number
    if version.state not in TESTABLE_STATES:
        raise errors.LoadTestNotAllowedError(name, number, f"it is {version.state}, not ready")
    if version.needs_approval and not version.approved:
        raise errors.LoadTestNotAllowedError(
            name,
            number,
            "it carries Python code, which a load test runs at length in the "
            "worker (no sandbox); an admin must approve it first",
        )
    if parse_config_text(version.config_text).platform == "ensemble":
        raise errors.LoadTestNotAllowedError(
            name, number, "ensembles are load-tested through their composing models"
        )


def load_test_start(
    *,
    version: ModelVersion,
    actor: Any,
    mode: str = "concurrency",
    rate_per_s: float = 0.0,
    concurrency: int = 1,
    duration_s: float = 10.0,
    inputs: list[Any] | None = None,
) -> LoadTest:
    """Queue a load test of ``version`` at one fixed shape."""
    version_check_testable(version)
    if mode not in ("rate", "concurrency") or (mode == "rate" and rate_per_s <= 0):
        raise errors.TuningParameterError(
            "mode must be 'rate' (with rate_per_s > 0) or 'concurrency'"
        )
    _check_duration(duration_s)
    parameters = {
        "mode": mode,
        "rate_per_s": rate_per_s,
        "concurrency": max(1, concurrency),
        "duration_s": duration_s,
        "inputs": inputs,
    }
    with transaction.atomic():
        job = LoadTest.objects.create(
            version=version, parameters=parameters, created_by=_user(actor)
        )
        _record(actor, Event.Action.LOADTEST_START, job, parameters)
        _enqueue_on_commit("run_load_test", job.pk)
    return job


def tuning_start(
    *,
    version: ModelVersion,
    actor: Any,
    slo: dict[str, Any] | None = None,
    rate_per_s: float | None = None,
    duration_s: float = 2.0,
    batching: list[str] | None = None,
    instances: list[int] | None = None,
    preferred_batch_sizes: list[int] | None = None,
    max_concurrency: int = 16,
    enqueue: bool = True,
) -> Tuning:
    """Queue a sweep of ``version`` against ``slo`` (default: the model's own SLO)."""
    version_check_testable(version)
    objective = _objective(version.model, slo, rate_per_s)
    parameters = _sweep_parameters(
        duration_s, batching, instances, preferred_batch_sizes, max_concurrency
    )
    with transaction.atomic():
        job = Tuning.objects.create(
            version=version, slo=objective, parameters=parameters, created_by=_user(actor)
        )
        _record(actor, Event.Action.TUNING_START, job, {"slo": objective, **parameters})
        if enqueue:
            _enqueue_on_commit("run_tuning", job.pk)
    return job


def job_cancel(*, job: Job, actor: Any) -> Job:
    """Ask the worker to stop; a job not yet started is cancelled at once."""
    with transaction.atomic():
        locked = type(job).objects.select_for_update().get(pk=job.pk)
        if locked.state in TERMINAL_JOB_STATES:
            raise errors.JobStateError(_kind(job), job.pk, state=locked.state, action="cancel")
        locked.cancel_requested = True
        if locked.state == JobState.QUEUED:
            locked.state, locked.finished_at = JobState.CANCELLED, timezone.now()
            locked.message = "cancelled before it started"
        locked.save()
    return locked


def tuning_apply(*, tuning: Tuning, actor: Any) -> ModelVersion:
    """Create the recommended version: the tuned config on the same blobs, then validated as any
    new version. Applying twice returns the version the first apply created."""
    with transaction.atomic():
        locked = (
            Tuning.objects.select_for_update().select_related("version__model").get(pk=tuning.pk)
        )
        if locked.applied_version is not None:
            return locked.applied_version
        if locked.state != JobState.SUCCEEDED:
            raise errors.JobStateError("tuning", locked.pk, state=locked.state, action="apply")
        chosen = (locked.recommendation or {}).get("setting")
        if not chosen:
            raise errors.NothingToApplyError(locked.pk, locked.recommendation.get("why", ""))
        base = locked.version
        text = tuned_config_text(base.config_text, Setting.from_dict(chosen))
        new = model_version_create_with_config(version=base, config_text=text, uploaded_by=actor)
        locked.applied_version = new
        locked.save(update_fields=["applied_version"])
        _record(
            actor, Event.Action.TUNING_APPLY, locked, {"setting": chosen, "new_version": new.number}
        )
    return new


def jobs_requeue_stale() -> list[str]:
    """Worker start-up sweep: a queued job or a running one whose heartbeat went stale is
    re-queued (a tuning resumes after the settings it finished); one that already used its
    attempts fails with the reason. Returns ``kind:id`` of what it touched."""
    touched = []
    cutoff = timezone.now() - STALE_AFTER
    for model, task in ((LoadTest, "run_load_test"), (Tuning, "run_tuning")):
        stale = model.objects.filter(state=JobState.RUNNING, heartbeat_at__lt=cutoff)
        queued = model.objects.filter(state=JobState.QUEUED, created_at__lt=cutoff)
        for job in [*stale, *queued]:
            if job.attempts >= MAX_ATTEMPTS:
                job_finish(
                    job=job,
                    state=JobState.FAILED,
                    error=f"its worker stopped {job.attempts} times while running it",
                )
            else:
                _enqueue_on_commit(task, job.pk)
            touched.append(f"{task}:{job.pk}")
    return touched


def job_finish(*, job: Job, state: str, error: str = "", message: str = "") -> None:
    job.state, job.error, job.finished_at = state, error, timezone.now()
    job.message = message or job.message
    if state == JobState.SUCCEEDED:
        job.progress = 1.0
    job.save()
    _record(None, Event.Action.JOB_FINISH, job, {"state": state, "error": error[:500]})


def _objective(model: Model, slo: dict[str, Any] | None, rate: float | None) -> dict[str, Any]:
    if slo is None:
        stored = Slo.objects.filter(model=model).first()
        if stored is None:
            raise errors.SloRequiredError(model.name)
        slo = slo_dict(stored)
    objective = {"percentile": 95, "max_error_rate": 0.001, "expected_rate_per_s": 0.0, **slo}
    if rate is not None:
        objective["expected_rate_per_s"] = rate
    if objective["latency_ms"] <= 0 or objective["percentile"] not in (95, 99):
        raise errors.TuningParameterError("the SLO needs latency_ms > 0 and percentile 95 or 99")
    return objective


def tuning_sweep_cores() -> tuple[int, str]:
    """The cores every tuned config is measured on, and what they are: a load-test pod's CPU
    limit when each config runs in a pod of its own, else what this worker may use."""
    if pod_job.runs_in_pods():
        limit = str(settings.PORTICO_LOADTEST_KUBERNETES_CPU)
        return pod_job.cpu_quantity_cores(limit), f"a load-test pod's CPU limit, {limit}"
    return usable_cpu_count(), "the cores here"


def _sweep_parameters(
    duration_s: float,
    batching: list[str] | None,
    instances: list[int] | None,
    preferred: list[int] | None,
    max_concurrency: int,
) -> dict[str, Any]:
    _check_duration(duration_s)
    cores, where = tuning_sweep_cores()
    instances = instances or list(range(1, min(cores, 4) + 1))
    if min(instances) < 1 or max(instances) > cores:
        raise errors.TuningParameterError(f"instances must lie in 1..{cores} ({where})")
    batching = batching or list(BATCHING_MODES)
    if not set(batching) <= set(BATCHING_MODES):
        raise errors.TuningParameterError(f"batching must be among {list(BATCHING_MODES)}")
    return {
        "duration_s": duration_s,
        "batching": batching,
        "instances": sorted(set(instances)),
        "preferred_batch_sizes": preferred or [],
        "max_concurrency": max(1, min(max_concurrency, 256)),
    }


def _check_duration(duration_s: float) -> None:
    if not 0 < duration_s <= MAX_DURATION_S:
        raise errors.TuningParameterError(f"duration_s must lie in (0, {MAX_DURATION_S:g}]")


def _kind(job: Job) -> str:
    return "tuning" if isinstance(job, Tuning) else "load test"


def _user(actor: Any) -> Any:
    return actor if actor is not None and actor.pk else None


def _record(actor: Any, action: str, job: Job, detail: dict[str, Any]) -> None:
    event_record(
        actor=actor,
        action=action,
        model=job.version.model,
        to_version=job.version.number,
        detail={"kind": _kind(job), "id": job.pk, **detail},
    )


def _enqueue_on_commit(task_name: str, job_id: int) -> None:
    transaction.on_commit(lambda: _enqueue(task_name, job_id))


def _enqueue(task_name: str, job_id: int) -> None:
    from repository.tuning import tasks

    try:
        getattr(tasks, task_name).delay(job_id)
    except Exception:  # noqa: BLE001 - kombu raises many kinds of connection errors
        logger.exception(
            "could not enqueue %s %s (the next worker start re-queues it)", task_name, job_id
        )
