"""Starting, cancelling and recovering jobs: who may load-test what, and what a worker restart
leaves behind (resumed, or failed with the reason once its attempts are spent)."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from repository.config.cpu_quota import usable_cpu_count
from repository.models import Event, JobState, Tuning
from repository.tuning import errors
from repository.tuning.runner import job_claim
from repository.tuning.services import (
    MAX_ATTEMPTS,
    job_cancel,
    jobs_requeue_stale,
    load_test_start,
    tuning_start,
)
from tests.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db

CONFIG = 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
SLO = {"latency_ms": 50.0}


def ready_version(**fields):  # type: ignore[no-untyped-def]
    return ModelVersionFactory(state="ready", config_text=CONFIG, **fields)


def test_code_is_load_tested_only_once_approved(deployer) -> None:  # type: ignore[no-untyped-def]
    version = ready_version(needs_approval=True)
    with pytest.raises(errors.LoadTestNotAllowedError, match="an admin must approve it first"):
        load_test_start(version=version, actor=deployer)
    with pytest.raises(errors.LoadTestNotAllowedError, match="not ready"):
        tuning_start(version=ModelVersionFactory(state="validating"), actor=deployer, slo=SLO)


def test_a_tuning_needs_an_slo(deployer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(errors.SloRequiredError):
        tuning_start(version=ready_version(), actor=deployer)


def test_cancelling_a_queued_job_ends_it_and_a_finished_one_refuses(deployer) -> None:  # type: ignore[no-untyped-def]
    job = tuning_start(version=ready_version(), actor=deployer, slo=SLO, enqueue=False)
    assert job_cancel(job=job, actor=deployer).state == JobState.CANCELLED
    with pytest.raises(errors.JobStateError):
        job_cancel(job=job, actor=deployer)
    assert job_claim(Tuning, job.pk) is None


def test_a_job_whose_worker_died_is_requeued_then_claimed_again(
    deployer, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    job = tuning_start(version=ready_version(), actor=deployer, slo=SLO, enqueue=False)
    assert job_claim(Tuning, job.pk) is not None
    assert job_claim(Tuning, job.pk) is None  # alive elsewhere: its heartbeat is fresh
    Tuning.objects.filter(pk=job.pk).update(
        heartbeat_at=timezone.now() - datetime.timedelta(minutes=5)
    )
    with django_capture_on_commit_callbacks() as queued:
        assert jobs_requeue_stale() == [f"run_tuning:{job.pk}"]
    assert len(queued) == 1
    claimed = job_claim(Tuning, job.pk)
    assert claimed is not None and claimed.attempts == 2 and claimed.state == JobState.RUNNING


def test_a_job_that_lost_its_worker_too_often_fails_with_the_reason(deployer) -> None:  # type: ignore[no-untyped-def]
    job = tuning_start(version=ready_version(), actor=deployer, slo=SLO, enqueue=False)
    stale = timezone.now() - datetime.timedelta(minutes=5)
    Tuning.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, attempts=MAX_ATTEMPTS, heartbeat_at=stale
    )
    jobs_requeue_stale()
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "worker stopped 3 times" in job.error
    assert Event.objects.filter(action="job_finish", detail__state="failed").exists()


def test_the_instance_sweep_is_bounded_by_the_cores_a_config_runs_on(deployer, settings) -> None:  # type: ignore[no-untyped-def]
    here = usable_cpu_count()
    with pytest.raises(errors.TuningParameterError, match=rf"1\.\.{here} \(the cores here\)"):
        tuning_start(
            version=ready_version(), actor=deployer, slo=SLO, instances=[here + 1], enqueue=False
        )
    # In pods, the pod's CPU limit bounds the sweep, whatever this worker has.
    settings.PORTICO_LOADTEST_RUNNER = "kubernetes"
    settings.PORTICO_LOADTEST_KUBERNETES_CPU = "2500m"
    job = tuning_start(version=ready_version(), actor=deployer, slo=SLO, enqueue=False)
    assert job.parameters["instances"] == [1, 2, 3]
    with pytest.raises(errors.TuningParameterError, match="a load-test pod's CPU limit, 2500m"):
        tuning_start(version=ready_version(), actor=deployer, slo=SLO, instances=[4], enqueue=False)
