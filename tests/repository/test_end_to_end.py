"""Upload → validate (real Celery worker, real serving.check) → ready → promote → roll back, with
real ONNX, TorchScript and Python models; and a worker killed mid-validation."""

from __future__ import annotations

import io
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from repository import demo_models, facade
from repository.models import Event, GoldenRequest, GoldenState, ModelVersion, VersionState
from repository.services import (
    golden_request_record,
    model_rollback,
    model_version_approve,
    model_version_create_from_upload,
    model_version_promote,
)
from tests.conftest import start_live_worker
from tests.repository.archives import make_tar_gz, make_zip

VALIDATION_TIMEOUT_S = 120
FAKE_CHECK = "tests.repository.validation.fake_check"


def archive(model_dir: Path, make=make_zip) -> bytes:  # type: ignore[no-untyped-def]
    return make(
        {
            p.relative_to(model_dir).as_posix(): p.read_bytes()
            for p in model_dir.rglob("*")
            if p.is_file()
        }
    )


def wait_for(
    version: ModelVersion, states: set[str], timeout_s: float = VALIDATION_TIMEOUT_S, worker=None
) -> ModelVersion:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        version.refresh_from_db()
        if version.state in states:
            return version
        time.sleep(0.2)
    log = worker.output()[-3000:] if worker is not None else ""
    raise AssertionError(f"{version} never reached {states}: {version.validation_steps}\n{log}")


def upload(user, model_dir: Path, *, name: str, make=make_zip) -> ModelVersion:  # type: ignore[no-untyped-def]
    return model_version_create_from_upload(
        model_name=name,
        uploaded_by=user,
        archive=io.BytesIO(archive(model_dir, make)),
        archive_name="model.zip",
    )


@pytest.fixture(autouse=True)
def isolated_uploads(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"


def test_upload_validate_promote_rollback_with_real_models_on_a_real_worker(  # type: ignore[no-untyped-def]
    live_worker, deployer, registry_admin, model_repo: Path
) -> None:
    onnx_v1 = demo_models.write_onnx_mlp(model_repo / "a", name="m", sizes=(8, 4), seed=1)
    onnx_v2 = demo_models.write_onnx_mlp(model_repo / "b", name="m", sizes=(8, 4), seed=2)
    torch_dir = demo_models.write_torchscript_add_sub(model_repo, name="t")
    python_dir = demo_models.write_python_add_sub(model_repo, name="p")

    v1 = upload(deployer, onnx_v1, name="m")
    v2 = upload(deployer, onnx_v2, name="m", make=make_tar_gz)
    tv = upload(deployer, torch_dir, name="t")
    pv = upload(deployer, python_dir, name="p")
    for version in (v1, v2, tv, pv):
        wait_for(version, {VersionState.READY, VersionState.FAILED}, worker=live_worker)
        assert version.state == VersionState.READY, version.validation_error
        assert {s["status"] for s in version.validation_steps} <= {"passed", "skipped"}

    # Golden request recorded on v1 by the worker, through the same check child.
    golden = golden_request_record(
        model=v1.model,
        name="ones",
        version=v1,
        actor=deployer,
        inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [1, 8], "data": [1.0] * 8}],
    )
    deadline = time.monotonic() + VALIDATION_TIMEOUT_S
    while golden.state == GoldenState.RECORDING and time.monotonic() < deadline:
        time.sleep(0.2)
        golden.refresh_from_db()
    assert golden.state == GoldenState.RECORDED, golden.error
    assert golden.expected_outputs["OUTPUT0"]["shape"] == [1, 4]

    revision = facade.serving_revision()
    model_version_promote(version=v1, actor=deployer)
    model_version_promote(version=v2, actor=deployer)
    model_version_promote(version=tv, actor=deployer)
    model_version_approve(version=pv, actor=registry_admin)
    model_version_promote(version=pv, actor=deployer)
    assert facade.serving_revision() == revision + 5
    promoted = {(s.model, s.version) for s in facade.serving_snapshot().promoted}
    assert promoted == {("m", 2), ("t", 1), ("p", 1)}

    assert model_rollback(model=v1.model, actor=deployer).number == 1
    v2.refresh_from_db()
    assert v2.state == VersionState.RETIRED
    assert {(s.model, s.version) for s in facade.serving_snapshot().promoted} == {
        ("m", 1),
        ("t", 1),
        ("p", 1),
    }
    actions = list(
        Event.objects.filter(model=v1.model).order_by("id").values_list("action", flat=True)
    )
    assert actions.count("upload") == 2 and actions.count("validated") == 2
    assert actions[-3:] == ["promote", "promote", "rollback"]


def test_new_version_that_breaks_a_golden_request_fails_naming_it(  # type: ignore[no-untyped-def]
    live_worker, deployer, model_repo: Path
) -> None:
    v1 = upload(
        deployer,
        demo_models.write_onnx_mlp(model_repo / "a", name="m", sizes=(8, 4), seed=1),
        name="m",
    )
    wait_for(v1, {VersionState.READY, VersionState.FAILED}, worker=live_worker)
    golden = golden_request_record(
        model=v1.model,
        name="ones",
        version=v1,
        actor=deployer,
        sync=True,
        inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [1, 8], "data": [1.0] * 8}],
    )
    assert golden.state == GoldenState.RECORDED, golden.error
    v2 = upload(
        deployer,
        demo_models.write_onnx_mlp(model_repo / "b", name="m", sizes=(8, 4), seed=7),
        name="m",
    )
    wait_for(v2, {VersionState.READY, VersionState.FAILED}, worker=live_worker)
    assert v2.state == VersionState.FAILED
    assert "golden request 'ones'" in v2.validation_error
    assert "OUTPUT0" in v2.validation_error
    assert GoldenRequest.objects.get().last_results["ok"] is False


def test_worker_killed_mid_validation_leaves_the_version_revalidatable(  # type: ignore[no-untyped-def]
    transactional_db, worker_queue: str, tmp_path: Path, deployer, monkeypatch
) -> None:
    # A scripted check that takes its time, so the worker is surely mid-validation when killed.
    monkeypatch.setenv("FAKE_CHECK", "slow")
    worker = start_live_worker(tmp_path, queue=worker_queue, check_module=FAKE_CHECK)
    try:
        version = model_version_create_from_upload(
            model_name="slow", uploaded_by=deployer, file=io.BytesIO(b"w"), file_name="model.onnx"
        )
        wait_for(version, {VersionState.VALIDATING}, timeout_s=60, worker=worker)
        time.sleep(1)
        worker.kill()
    finally:
        worker.stop()
    version.refresh_from_db()
    assert version.state == VersionState.VALIDATING  # left behind by the dead worker
    # Time passes beyond the validation limit: the next worker to start picks it up again.
    ModelVersion.objects.filter(pk=version.pk).update(
        validation_started_at=timezone.now() - timedelta(hours=1)
    )
    monkeypatch.setenv("FAKE_CHECK", "ok")
    second = start_live_worker(tmp_path, queue=worker_queue, check_module=FAKE_CHECK)
    try:
        wait_for(version, {VersionState.READY, VersionState.FAILED}, worker=second)
    finally:
        second.stop()
    assert version.state == VersionState.READY, version.validation_error
    assert "re-queued abandoned validations" in second.output()
    started = Event.objects.filter(action="validation_started", to_version=version.number)
    assert started.count() == 2
