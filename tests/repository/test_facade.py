"""The serving facade: frozen snapshots of what to serve, blobs, heartbeats."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.utils import timezone

from repository import facade
from repository.models import ServingReplica, VersionFile, VersionState
from repository.services import model_version_approve, model_version_promote
from tests.factories import BlobFactory, ModelFactory, ModelVersionFactory, VersionFileFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_snapshot_lists_promoted_and_loadable_versions_as_frozen_dataclasses(deployer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory(name="mlp")
    v1 = ModelVersionFactory(model=model, number=1)
    v2 = ModelVersionFactory(model=model, number=2)
    VersionFileFactory(version=v2, path="model.onnx")
    VersionFileFactory(version=v2, path="labels.txt", model_level=True)
    ModelVersionFactory(model=model, number=3, state=VersionState.FAILED)
    model_version_promote(version=v1, actor=deployer)
    model_version_promote(version=v2, actor=deployer)
    snap = facade.serving_snapshot()
    assert snap.revision == facade.serving_revision() > 0
    assert [(s.model, s.version) for s in snap.promoted] == [("mlp", 2)]
    assert [(s.model, s.version) for s in snap.loadable] == [("mlp", 1), ("mlp", 2)]
    served = snap.promoted[0]
    assert served.config_text == v2.config_text
    assert [f.path for f in served.files] == ["model.onnx"]
    assert [f.path for f in served.model_files] == ["labels.txt"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        served.version = 5  # type: ignore[misc]
    with facade.blob_open(served.files[0].sha256) as f:
        assert len(f.read()) == served.files[0].size


def test_unapproved_code_bearing_versions_are_not_loadable() -> None:
    ModelVersionFactory(needs_approval=True)
    approved = ModelVersionFactory(needs_approval=True, approved_at=timezone.now())
    assert [s.version for s in facade.serving_snapshot().loadable] == [approved.number]


def test_code_changed_after_approval_is_no_longer_offered_to_serving(  # type: ignore[no-untyped-def]
    deployer, registry_admin, caplog
) -> None:
    model = ModelFactory(name="py", backend="python")
    version = ModelVersionFactory(model=model, number=1, needs_approval=True, uploaded_by=deployer)
    approved_file = VersionFileFactory(version=version, path="model.py")
    VersionFileFactory(version=version, path="labels.txt", model_level=True)
    model_version_approve(version=version, actor=registry_admin)
    model_version_promote(version=version, actor=deployer)
    snap = facade.serving_snapshot()
    assert [(s.model, s.version) for s in snap.promoted] == [("py", 1)]
    assert snap.promoted[0].files[0].sha256 == approved_file.blob_id
    # A hostile write to the database points the approved file at other content.
    VersionFile.objects.filter(pk=approved_file.pk).update(blob=BlobFactory(content=b"evil"))
    snap = facade.serving_snapshot()
    assert snap.promoted == () and snap.loadable == ()
    assert "py v1 is not served: files differ from the ones approved (model.py)" in caplog.text


def test_a_kept_snapshot_reads_back_equal_to_the_one_written(deployer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory(name="mlp")
    v1 = ModelVersionFactory(model=model, number=1)
    VersionFileFactory(version=v1, path="model.onnx")
    VersionFileFactory(version=v1, path="labels.txt", model_level=True)
    model_version_promote(version=v1, actor=deployer)
    snapshot = facade.serving_snapshot()
    assert facade.snapshot_loads(facade.snapshot_dumps(snapshot)) == snapshot


def test_heartbeat_upserts_and_live_replicas_drops_silent_ones() -> None:
    started = timezone.now()
    versions = [{"model": "mlp", "version": 2, "state": "READY", "reason": ""}]
    for _ in range(2):
        facade.replica_heartbeat(
            replica_id="r1",
            address="10.0.0.1:8001",
            http_url="http://10.0.0.1:8000",
            started_at=started,
            versions=versions,
            last_error="",
        )
    facade.replica_heartbeat(
        replica_id="r2",
        address="x",
        http_url="http://x",
        started_at=started,
        versions=[],
        last_error="boom",
    )
    ServingReplica.objects.filter(replica_id="r2").update(
        last_seen=timezone.now() - timedelta(seconds=60)
    )
    live = facade.live_replicas(max_age_s=15)
    assert [r.replica_id for r in live] == ["r1"]
    assert live[0].versions == tuple(versions) and live[0].http_url == "http://10.0.0.1:8000"
    assert ServingReplica.objects.count() == 2


def test_revision_channel_is_the_agreed_name() -> None:
    assert facade.REVISION_CHANNEL == "portico:revision"
