"""The tuner through the management API, for real: the demo MLP uploaded and validated by a real
Celery worker, a golden request recorded, then a tuning job (three batching settings × two
instance counts, short runs) on the worker against the real serving code, and its recommendation
applied as a new version that validates."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from repository.config.parse import parse_config_text
from repository.demo_models import DEMO_FEATURES, write_onnx_mlp
from tests.console.api.test_end_to_end import create_token, upload_and_wait, wait_for, zipped

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

SLO_P95_MS = 400.0
RATE_PER_S = 20.0
TERMINAL_JOB = {"succeeded", "failed", "cancelled"}
TERMINAL = {"ready", "failed", "promoted", "retired"}


def demo_mlp_ready(client: APIClient, tmp_path) -> dict:  # type: ignore[no-untyped-def]
    model_dir = write_onnx_mlp(tmp_path / "models", "mlp", 1, max_batch_size=64)
    version = upload_and_wait(client, "mlp", {"archive": zipped(model_dir)})
    assert version["state"] == "ready", version["validation"]
    ones = [
        {
            "name": "INPUT0",
            "datatype": "FP32",
            "shape": [1, DEMO_FEATURES],
            "data": [0.5] * DEMO_FEATURES,
        }
    ]
    golden = client.post(
        "/api/models/mlp/golden/", {"name": "real", "inputs": ones, "version": 1}, format="json"
    )
    assert golden.status_code in (201, 202), golden.json()
    url = f"/api/models/mlp/golden/{golden.json()['id']}/"
    assert wait_for(client, url, lambda b: b["state"] != "recording")["state"] == "recorded"
    return version


def test_tuning_job_measures_every_setting_recommends_within_slo_and_applies(
    live_worker, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    client = create_token("tuner-bot", "deployer")
    demo_mlp_ready(client, tmp_path)
    slo = client.put(
        "/api/models/mlp/slo/",
        {
            "latency_ms": SLO_P95_MS,
            "percentile": 95,
            "expected_rate_per_s": RATE_PER_S,
            "max_error_rate": 0.01,
        },
        format="json",
    )
    assert slo.status_code == 200, slo.json()

    started = client.post(
        "/api/models/mlp/versions/1/tunings/",
        {
            "duration_s": 0.5,
            "batching": ["off", "low", "high"],
            "instances": [1, 2],
            "max_concurrency": 4,
        },
        format="json",
    )
    assert started.status_code == 202, started.json()
    url = f"/api/models/mlp/versions/1/tunings/{started.json()['id']}/"
    job = wait_for(client, url, lambda b: b["state"] in TERMINAL_JOB)
    assert job["state"] == "succeeded", (job["error"], live_worker.output()[-3000:])
    assert job["progress"] == 1.0

    results = job["results"]
    assert len(results) == 6
    assert {(r["setting"]["batching"], r["setting"]["instances"]) for r in results} == {
        (b, n) for b in ("off", "low", "high") for n in (1, 2)
    }
    for result in results:
        assert result["p95_ms"] > 0 and result["throughput_per_s"] > 0, result
        assert isinstance(result["queue_ms"], float), result
        assert result["at_rate"]["rate_per_s"] == RATE_PER_S and result["curve"], result
    probe = results[0]["curve"][0]
    waits = {r["setting"]["batching"]: r["setting"]["max_queue_delay_us"] for r in results}
    assert 0 == waits["off"] < waits["low"] < waits["high"], (waits, probe)

    chosen = job["recommendation"]["setting"]
    assert chosen is not None, job["recommendation"]
    winner = next(r for r in results if r["setting"] == chosen)
    assert winner["meets_slo"] and winner["p95_ms"] <= SLO_P95_MS
    assert job["recommendation"]["why"]

    applied = client.post(f"{url}apply/")
    assert applied.status_code == 202, applied.json()
    new = wait_for(client, applied.json()["url"], lambda b: b["state"] in TERMINAL)
    assert new["state"] == "ready", new["validation"]
    old_cfg = parse_config_text(client.get("/api/models/mlp/versions/1/").json()["config"])
    new_cfg = parse_config_text(new["config"])
    assert [g.count for g in new_cfg.instance_group] == [chosen["instances"]]
    assert new_cfg.HasField("dynamic_batching") == (chosen["batching"] != "off")
    for cfg in (old_cfg, new_cfg):
        cfg.ClearField("dynamic_batching")
        for group in cfg.instance_group:
            group.count = 0
    assert old_cfg == new_cfg
    assert client.post(f"{url}apply/").json()["version"] == new["version"]  # applying is idempotent

    actions = [e["action"] for e in client.get("/api/events/?model=mlp").json()["results"]]
    assert {"slo_set", "tuning_start", "job_finish", "tuning_apply"} <= set(actions)
