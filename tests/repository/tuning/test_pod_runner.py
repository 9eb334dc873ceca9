"""Load tests with ``PORTICO_LOADTEST_RUNNER=kubernetes``: the pod's own process
(``python -m repository.tuning.pod --bundle-stdin``) runs for real as a local subprocess standing
where the launcher attaches to a pod (no cluster here: the API calls are the check Job's, see
docs/tuning.md), measures the demo ``mlp`` and its results land in the job's row; a cancel kills it.
"""

from __future__ import annotations

import datetime
import io
import secrets
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connections

from repository.config.check_wire import FrameReader, bundle_header
from repository.demo_models import write_onnx_mlp
from repository.models import JobState, LoadTest, ModelVersion
from repository.tuning import pod_job
from repository.tuning.jobs import load_test_run, tuning_run
from repository.tuning.services import job_cancel, load_test_start, tuning_start
from tests.repository.validation.local_transport import LocalCheckProcess

POD = [sys.executable, "-m", "repository.tuning.pod", "--bundle-stdin"]


@pytest.fixture
def local_pods(settings, tmp_path: Path, monkeypatch) -> list[LocalCheckProcess]:  # type: ignore[no-untyped-def]
    """Each load-test pod the worker would start is a local process instead."""
    settings.PORTICO_LOADTEST_RUNNER = "kubernetes"
    started: list[LocalCheckProcess] = []

    def local_pod(bundle_bytes: int) -> LocalCheckProcess:
        scratch = tmp_path / f"pod-{len(started) + 1}"
        started.append(LocalCheckProcess(scratch, max_bundle_bytes=bundle_bytes, argv=list(POD)))
        return started[-1]

    monkeypatch.setattr(pod_job, "load_test_pod_start", local_pod)
    return started


def _queued(model_repo: Path, *, duration_s: float) -> LoadTest:
    write_onnx_mlp(model_repo, "mlp", 1, sizes=(16, 32, 4), max_batch_size=8)
    call_command("import_repository", str(model_repo), sync=True, stdout=io.StringIO())
    actor = get_user_model().objects.create_user("deployer")
    version = ModelVersion.objects.get(model__name="mlp", number=1)
    return load_test_start(version=version, actor=actor, concurrency=2, duration_s=duration_s)


@pytest.mark.django_db
@pytest.mark.timeout(300)
def test_a_load_test_runs_in_its_pod_and_lands_in_the_row(  # type: ignore[no-untyped-def]
    local_pods, model_repo: Path
) -> None:
    job = _queued(model_repo, duration_s=1.0)
    load_test_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    result = job.result
    assert result["mode"] == "concurrency" and result["concurrency"] == 2
    assert result["generator"] == "built-in" and result["requests"] > 0 and result["errors"] == 0
    assert 0 < result["p50_ms"] <= result["p95_ms"] <= result["p99_ms"]
    assert result["throughput_per_s"] > 0 and result["compute_infer_ms"] > 0
    assert result["batch_sizes"] and result["cpu_percent"] > 0
    assert result["inputs"]  # what was sent is said, as for a run in the worker
    (pod,) = local_pods
    assert pod.proc.poll() is not None  # the pod ended with the job


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_cancelling_a_load_test_kills_its_pod_mid_run(  # type: ignore[no-untyped-def]
    local_pods, model_repo: Path
) -> None:
    job = _queued(model_repo, duration_s=120.0)

    def work() -> None:
        try:
            load_test_run(job_id=job.pk)
        finally:
            connections.close_all()  # this thread's own connection

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if "measuring" in job.message:
            break
        time.sleep(0.2)
    assert "measuring" in job.message, (job.state, job.message, job.error)
    job_cancel(job=job, actor=None)
    worker.join(timeout=60)
    assert not worker.is_alive()
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED, job.error
    assert job.finished_at < job.started_at + datetime.timedelta(seconds=120)
    (pod,) = local_pods
    assert pod.proc.poll() is not None  # killed, not left to finish its 120 s run


@pytest.mark.django_db
@pytest.mark.timeout(300)
def test_a_tuning_serves_each_setting_in_a_pod_of_its_own(  # type: ignore[no-untyped-def]
    local_pods, model_repo: Path
) -> None:
    job = _queued(model_repo, duration_s=1.0)
    tuning = tuning_start(
        version=job.version,
        actor=None,
        slo={"latency_ms": 5000, "expected_rate_per_s": 0},
        duration_s=0.6,
        batching=["off", "low"],
        instances=[1],
        max_concurrency=1,
        enqueue=False,
    )
    tuning_run(job_id=tuning.pk)
    tuning.refresh_from_db()
    assert tuning.state == JobState.SUCCEEDED, tuning.error
    assert [r["setting"]["batching"] for r in tuning.results] == ["off", "low"]
    for result in tuning.results:
        (run,) = result["curve"]
        assert run["p95_ms"] > 0 and run["throughput_per_s"] > 0 and run["requests"] > 0
    assert tuning.recommendation
    # The probe (batching off, which is also the first setting: measured once) and the low wait.
    assert len(local_pods) == 2
    assert all(pod.proc.poll() is not None for pod in local_pods)


def test_the_pod_refuses_a_bundle_that_escapes_its_folder(tmp_path: Path) -> None:
    # The check's refusals (tests/repository/validation/test_bundle_check.py) hold here too: the
    # unpacking is the same code.
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    data = archive.getvalue()
    nonce = secrets.token_hex(16)
    pod = LocalCheckProcess(tmp_path / "pod", max_bundle_bytes=len(data), argv=list(POD))
    try:
        pod.send(bundle_header(nonce, len(data)) + data)
        reader, events = FrameReader(nonce), []
        deadline = time.monotonic() + 60
        while (chunk := pod.receive(1.0)) is not None and time.monotonic() < deadline:
            events += reader.feed(chunk[0])
        assert pod.returncode() == 1
    finally:
        pod.stop()
    (event,) = events
    assert event["event"] == "error" and "stay inside the bundle" in event["message"]
    assert not (tmp_path / "pod" / "escaped.txt").exists()


@pytest.mark.django_db
def test_without_a_cluster_the_load_test_fails_with_the_reason(settings, model_repo: Path) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_LOADTEST_RUNNER = "kubernetes"
    job = _queued(model_repo, duration_s=1.0)
    load_test_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    # Never measured in the worker instead: no client, or no in-cluster credentials, says which.
    assert "SandboxUnavailableError" in job.error and "kubernetes" in job.error.lower()
    assert job.result in (None, {})
