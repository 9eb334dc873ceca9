"""Cancelling a running tuning stops its worker in the middle of a measurement and records how it
ended in the audit log."""

from __future__ import annotations

import datetime

import pytest

from repository.demo_models import write_onnx_mlp
from repository.models import Event, Tuning
from tests.console.api.test_end_to_end import create_token, upload_and_wait, wait_for, zipped

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(400)]


def test_a_running_tuning_is_cancelled_mid_measurement(live_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = create_token("tuner-bot", "deployer")
    folder = write_onnx_mlp(tmp_path / "models", "mlp", 1, sizes=(16, 32, 4), max_batch_size=8)
    assert upload_and_wait(client, "mlp", {"archive": zipped(folder)})["state"] == "ready"
    started = client.post(
        "/api/models/mlp/versions/1/tunings/",
        {"slo_p95_ms": 1000, "duration_s": 60, "instances": [1]},
        format="json",
    )
    url = f"/api/models/mlp/versions/1/tunings/{started.json()['id']}/"
    running = wait_for(
        client, url, lambda b: b["state"] == "running" and "concurrency" in b["message"]
    )
    assert running["state"] == "running", live_worker.output()[-3000:]

    assert client.post(f"{url}cancel/").json()["cancel_requested"] is True
    job = wait_for(client, url, lambda b: b["state"] != "running")
    assert job["state"] == "cancelled", job
    tuning = Tuning.objects.get(pk=job["id"])
    # It ended before its first 60 s measurement could have: the cancel cut that measurement.
    assert tuning.finished_at < tuning.started_at + datetime.timedelta(seconds=60)
    assert tuning.results == [] and tuning.recommendation == {}
    assert Event.objects.filter(action="job_finish", detail__state="cancelled").exists()
