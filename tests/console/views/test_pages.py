"""What the read pages show: models list (search, sort, empty state), version page, audit log,
replicas, the live serving panel."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from repository.models import ServingReplica
from repository.services import event_record
from tests.factories import ModelFactory, ModelVersionFactory

pytestmark = pytest.mark.embedded


@pytest.fixture
def replica(db):  # type: ignore[no-untyped-def]
    now = timezone.now()
    return ServingReplica.objects.create(
        replica_id="replica-a",
        address="10.0.0.5:8000",
        http_url="http://10.0.0.5:8000",
        started_at=now - timedelta(hours=2),
        last_seen=now,
        versions=[
            {"model": "mlp", "version": 2, "state": "READY", "reason": ""},
            {"model": "mlp", "version": 3, "state": "UNAVAILABLE", "reason": "out of memory"},
        ],
        last_error="mlp v3: out of memory",
    )


def test_empty_models_list_explains_what_to_do(deployer_client):
    body = deployer_client.get(reverse("console:model-list")).content.decode()
    assert "No models yet." in body
    assert "Upload an ONNX, TorchScript or Python model" in body


def test_models_list_shows_promoted_version_and_live_replicas(viewer_client, catalog, replica):
    body = viewer_client.get(reverse("console:model-list")).content.decode()
    assert "mlp" in body and "pyfn" in body
    assert ">v2</a>" in body
    assert "1 / 1" in body  # one of one live replicas serves mlp's promoted version
    assert "—" in body  # no live stats collector in this process


def test_models_list_search_and_sort(viewer_client, catalog):
    ModelFactory(name="zeta")
    body = viewer_client.get(reverse("console:model-list") + "?q=py").content.decode()
    assert "pyfn" in body and ">mlp<" not in body
    body = viewer_client.get(reverse("console:model-list") + "?sort=-name").content.decode()
    assert body.index("zeta") < body.index("pyfn") < body.index(">mlp<")
    body = viewer_client.get(reverse("console:model-list") + "?q=nothing-like-it").content.decode()
    assert "No model matches" in body


def test_models_list_shows_the_last_event(viewer_client, catalog, deployer):
    event_record(
        actor=deployer, action="promote", model=catalog["mlp"], from_version=1, to_version=2
    )
    body = viewer_client.get(reverse("console:model-list")).content.decode()
    assert "Promote" in body and "deployer" in body


def test_version_page_shows_steps_config_marks_diff_and_io(viewer_client, catalog):
    body = viewer_client.get(reverse("console:version-detail", args=["mlp", 3])).content.decode()
    assert "loaded" in body and "120 ms" in body
    assert '<span class="autocompleted" title="auto-completed">dynamic_batching {</span>' in body
    assert '<span class="del">-max_batch_size: 8</span>' in body
    assert '<span class="add">+max_batch_size: 16</span>' in body
    assert "INPUT0" in body and "[-1, 4]" in body and "FP32" in body


def test_version_page_shows_a_pending_gpu_check_then_the_replicas_outcome(viewer_client, catalog):
    version = catalog["v3"]
    version.gpu_check, version.gpu_check_message = "pending", "this validation worker: no GPU"
    version.save(update_fields=["gpu_check", "gpu_check_message"])
    url = reverse("console:version-detail", args=["mlp", 3])
    body = viewer_client.get(url).content.decode()
    assert '<span class="badge pending">pending</span>' in body
    assert "Validated without a usable GPU (this validation worker: no GPU)" in body
    report = {"ok": False, "message": "GPU check failed: GPU 0: golden request 4: OUTPUT0 differs"}
    ServingReplica.objects.create(
        replica_id="gpu-a", address="gpu-a:8000", started_at=timezone.now(),
        last_seen=timezone.now(),
        versions=[{"model": "mlp", "version": 3, "state": "UNAVAILABLE",
                   "reason": report["message"], "gpu_check": report}],
    )  # fmt: skip
    body = viewer_client.get(url).content.decode()
    assert '<span class="badge failed">failed</span>' in body
    assert "On replica gpu-a" in body and "golden request 4: OUTPUT0 differs" in body


def test_failed_version_says_which_step_failed_and_why(viewer_client, catalog):
    version = ModelVersionFactory(
        model=catalog["mlp"],
        number=4,
        state="failed",
        validation_steps=[
            {"name": "config", "status": "passed", "message": "", "duration_ms": 2},
            {
                "name": "load",
                "status": "failed",
                "message": "not an ONNX model: protobuf parse error",
                "duration_ms": 15,
            },
        ],
    )
    body = viewer_client.get(
        reverse("console:version-detail", args=["mlp", version.number])
    ).content.decode()
    assert "Validation failed at “load”: not an ONNX model: protobuf parse error" in body
    listing = viewer_client.get(reverse("console:model-detail", args=["mlp"])).content.decode()
    assert "Failed at “load”" in listing


def test_version_progress_json_matches_the_websocket_message(viewer_client, catalog):
    data = viewer_client.get(reverse("console:version-progress", args=[catalog["v3"].pk])).json()
    assert data["state"] == "ready" and data["version"] == 3 and len(data["steps"]) == 2


def test_model_serving_panel_shows_each_replica_and_load_errors(viewer_client, catalog, replica):
    body = viewer_client.get(reverse("console:model-serving", args=["mlp"])).content.decode()
    assert "10.0.0.5:8000" in body
    assert "v2 READY" in body and "out of memory" in body
    assert "v2 live" in body


def test_model_serving_panel_shows_the_switch_over(viewer_client, catalog, replica, deployer):
    from repository.services import model_version_promote

    model_version_promote(version=catalog["v3"], actor=deployer)
    body = viewer_client.get(reverse("console:model-serving", args=["mlp"])).content.decode()
    assert "switching to v3" in body


def test_serving_panel_without_replicas_says_nothing_serves(viewer_client, catalog):
    body = viewer_client.get(reverse("console:model-serving", args=["mlp"])).content.decode()
    assert "No serving replica has sent a heartbeat" in body


def test_replicas_page(viewer_client, catalog, replica):
    ServingReplica.objects.create(
        replica_id="replica-gone",
        address="10.0.0.6:8000",
        started_at=timezone.now(),
        last_seen=timezone.now() - timedelta(minutes=5),
        versions=[],
    )
    body = viewer_client.get(reverse("console:replica-list")).content.decode()
    assert "1 live" in body and "no heartbeat" in body
    assert "mlp v3: out of memory" in body
    assert "2 h 0 min" in body


def test_replicas_page_empty_state(viewer_client):
    body = viewer_client.get(reverse("console:replica-list")).content.decode()
    assert "No serving replica has reported yet." in body


def test_audit_log_filters_and_links(viewer_client, catalog, deployer, admin_user):
    event_record(
        actor=deployer, action="promote", model=catalog["mlp"], from_version=1, to_version=2
    )
    event_record(actor=admin_user, action="approve", model=catalog["pyfn"], to_version=1)
    url = reverse("console:event-list")
    body = viewer_client.get(url).content.decode()
    assert "alice-admin" in body and "deployer" in body
    assert reverse("console:version-detail", args=["mlp", 2]) in body
    body = viewer_client.get(url + "?model=pyfn").content.decode()
    assert reverse("console:version-detail", args=["pyfn", 1]) in body
    assert reverse("console:version-detail", args=["mlp", 2]) not in body
    body = viewer_client.get(url + "?user=deployer&action=promote").content.decode()
    assert reverse("console:version-detail", args=["mlp", 2]) in body
    body = viewer_client.get(url + "?action=rollback").content.decode()
    assert "No events match these filters." in body
