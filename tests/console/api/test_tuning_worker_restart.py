"""A worker killed in the middle of a tuning: the next worker's start-up sweep finds the job (its
heartbeat gone stale) and resumes it after the settings it had finished, which are kept."""

from __future__ import annotations

import datetime
import time

import pytest
from django.utils import timezone

from repository.demo_models import write_onnx_mlp
from repository.models import Tuning
from tests.conftest import start_live_worker
from tests.console.api.test_end_to_end import create_token, upload_and_wait, wait_for, zipped

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]


def test_a_tuning_whose_worker_dies_is_resumed_by_the_next_worker(
    live_worker, worker_queue, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    client = create_token("tuner-bot", "deployer")
    folder = write_onnx_mlp(tmp_path / "models", "mlp", 1, sizes=(16, 32, 4), max_batch_size=8)
    assert upload_and_wait(client, "mlp", {"archive": zipped(folder)})["state"] == "ready"
    started = client.post(
        "/api/models/mlp/versions/1/tunings/",
        {
            "slo_p95_ms": 1000,
            "duration_s": 0.5,
            "batching": ["off", "high"],
            "instances": [1],
            "max_concurrency": 2,
        },
        format="json",
    )
    job_id = started.json()["id"]
    deadline = time.monotonic() + 180
    while not Tuning.objects.get(pk=job_id).results:
        assert time.monotonic() < deadline, live_worker.output()[-3000:]
        time.sleep(0.2)
    live_worker.kill()
    probe = Tuning.objects.get(pk=job_id).results[0]
    assert Tuning.objects.get(pk=job_id).state == "running"
    # As if the sweep's grace period had passed since the dead worker's last heartbeat.
    Tuning.objects.filter(pk=job_id).update(
        heartbeat_at=timezone.now() - datetime.timedelta(minutes=5)
    )

    second = start_live_worker(tmp_path, queue=worker_queue)
    try:
        url = f"/api/models/mlp/versions/1/tunings/{job_id}/"
        job = wait_for(client, url, lambda b: b["state"] in ("succeeded", "failed", "cancelled"))
        assert job["state"] == "succeeded", (job["error"], second.output()[-3000:])
    finally:
        second.stop()
    assert "re-queued abandoned jobs" in second.output()
    resumed = Tuning.objects.get(pk=job_id)
    assert resumed.attempts == 2 and len(resumed.results) == 2
    assert resumed.results[0] == probe  # finished settings are kept, not measured again
    assert resumed.recommendation["setting"] is not None
