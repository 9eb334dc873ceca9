"""Creating versions from uploads: blobs stored once, numbering, events, validation enqueued."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from repository.blobs import blob_open
from repository.errors import InvalidModelNameError, UploadError
from repository.models import Blob, Event, Model, ModelVersion, VersionState
from repository.services import model_version_create_from_upload, model_version_create_with_config
from tests.repository.archives import make_zip

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

CONFIG = 'name: "m"\nbackend: "onnxruntime"\n'


@pytest.fixture(autouse=True)
def isolated_storage(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"


def upload(user, **kwargs):  # type: ignore[no-untyped-def]
    return model_version_create_from_upload(model_name="m", uploaded_by=user, **kwargs)


def test_archive_upload_creates_model_and_version_and_enqueues_validation(  # type: ignore[no-untyped-def]
    deployer, django_capture_on_commit_callbacks
) -> None:
    data = make_zip({"config.pbtxt": CONFIG.encode(), "1/model.onnx": b"weights", "l.txt": b"a"})
    with django_capture_on_commit_callbacks() as callbacks:
        version = upload(deployer, archive=io.BytesIO(data), archive_name="m.zip")
    assert len(callbacks) == 1  # the validation task, sent only after commit
    assert (version.model.name, version.number, version.state) == ("m", 1, VersionState.UPLOADED)
    assert version.submitted_config_text == CONFIG
    assert version.uploaded_by == deployer
    assert version.model.owner == deployer
    files = {(f.path, f.model_level): f.blob for f in version.files.all()}
    assert set(files) == {("model.onnx", False), ("l.txt", True)}
    with blob_open(files[("model.onnx", False)].sha256) as f:
        assert f.read() == b"weights"
    assert version.size == len(b"weights") + 1
    assert Event.objects.get(action="upload").to_version == 1


def test_identical_content_is_stored_once_and_numbers_increase(deployer) -> None:  # type: ignore[no-untyped-def]
    v1 = upload(deployer, file=io.BytesIO(b"same"), file_name="model.onnx", config_text=CONFIG)
    v2 = upload(deployer, file=io.BytesIO(b"same"), file_name="model.onnx")
    assert (v1.number, v2.number) == (1, 2)
    assert Blob.objects.count() == 1
    assert v1.files.get().blob_id == v2.files.get().blob_id


def test_python_file_marks_the_version_as_needing_approval(deployer) -> None:  # type: ignore[no-untyped-def]
    version = upload(
        deployer, file=io.BytesIO(b"class TritonPythonModel: ..."), file_name="model.py"
    )
    assert version.needs_approval


def test_bad_model_name_is_refused_before_anything_is_stored(deployer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidModelNameError):
        model_version_create_from_upload(
            model_name="../etc", uploaded_by=deployer, file=io.BytesIO(b"x"), file_name="model.onnx"
        )
    assert not Model.objects.exists()
    assert not Blob.objects.exists()


def test_bad_archive_creates_no_version_no_model_no_blob(deployer, settings) -> None:  # type: ignore[no-untyped-def]
    data = make_zip({"1/model.onnx": b"x", "../evil": b"y"})
    with pytest.raises(UploadError):
        upload(deployer, archive=io.BytesIO(data))
    assert not Model.objects.exists() and not Blob.objects.exists()
    assert list(Path(settings.UPLOAD_DIR).iterdir()) == []


def test_exactly_one_upload_shape_is_required(deployer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UploadError, match="exactly one"):
        upload(deployer)


def test_config_change_reuses_blobs_in_a_new_version(deployer) -> None:  # type: ignore[no-untyped-def]
    v1 = upload(deployer, file=io.BytesIO(b"w"), file_name="model.onnx")
    v2 = model_version_create_with_config(version=v1, config_text=CONFIG, uploaded_by=deployer)
    assert v2.number == 2
    assert v2.submitted_config_text == CONFIG
    assert v2.files.get().blob_id == v1.files.get().blob_id
    assert ModelVersion.objects.count() == 2
