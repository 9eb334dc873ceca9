"""Four eyes over the management API: no admin can approve code alone, neither through a token
made for another admin nor through a config-only copy of their own code; an approval records the
approved files' hashes, and code changed behind the registry's back cannot be promoted."""

from __future__ import annotations

import hashlib

import pytest

from repository.models import ApiToken, Event, ModelVersion, VersionFile
from tests.console.api.conftest import assert_error, token_client, validate, zip_archive
from tests.factories import BlobFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

CONFIG = b'name: "py"\nbackend: "python"\n'
MODEL_PY = b"class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"


def upload_code(client) -> int:  # type: ignore[no-untyped-def]
    archive = zip_archive({"config.pbtxt": CONFIG, "1/model.py": MODEL_PY})
    response = client.post("/api/models/py/versions/", {"archive": archive})
    assert response.status_code == 202, response.json()
    number = int(response.json()["version"])
    assert validate("py", number).state == "ready"
    return number


def test_admin_cannot_create_a_deploying_token_for_another_admin(
    registry_admin, second_admin
) -> None:  # type: ignore[no-untyped-def]
    author = token_client(registry_admin, "admin")
    number = upload_code(author)
    for role in ("admin", "deployer"):
        response = author.post("/api/tokens/", {"role": role, "user": second_admin.username})
        body = assert_error(response, 403, "token_for_another_user")
        assert body["extra"] == {
            "actor": registry_admin.username,
            "user": second_admin.username,
            "role": role,
            "allowed": ["invoker", "viewer"],  # an invoker token calls models; it cannot approve
        }
    assert not ApiToken.objects.filter(user=second_admin).exists()
    assert not Event.objects.filter(action="token_create", detail__user="second-admin").exists()
    # ...so the author's only way to approve is as themself, which is refused.
    assert_error(author.post(f"/api/models/py/versions/{number}/approve/"), 403, "self_approval")
    assert not ModelVersion.objects.get(number=number).approved


def test_admin_may_create_a_viewer_token_for_another_user(as_admin, deployer) -> None:  # type: ignore[no-untyped-def]
    response = as_admin.post("/api/tokens/", {"role": "viewer", "user": deployer.username})
    assert response.status_code == 201
    assert (response.json()["user"], response.json()["role"]) == (deployer.username, "viewer")


def test_original_uploader_cannot_approve_a_config_only_copy(  # type: ignore[no-untyped-def]
    registry_admin, second_admin, deployer
) -> None:
    author = token_client(registry_admin, "admin")
    original = upload_code(author)
    changed = token_client(deployer, "deployer").post(
        f"/api/models/py/versions/{original}/config/",
        {"config": CONFIG.decode() + "max_batch_size: 8\n"},
        format="json",
    )
    assert changed.status_code == 202
    copy = int(changed.json()["version"])
    assert validate("py", copy).state == "ready"

    body = assert_error(
        author.post(f"/api/models/py/versions/{copy}/approve/"), 403, "code_uploader_approval"
    )
    assert body["extra"] == {"model": "py", "version": copy, "user": registry_admin.username}
    assert registry_admin.username in body["message"]
    assert not ModelVersion.objects.get(number=copy).approved

    approved = token_client(second_admin, "admin").post(f"/api/models/py/versions/{copy}/approve/")
    assert approved.status_code == 200
    version = approved.json()
    assert (version["approved"], version["approved_by"]) == (True, second_admin.username)
    assert version["uploaded_by"] == deployer.username
    assert version["code_uploaders"] == [registry_admin.username]
    assert version["approved_code"] == {
        "files": {"model.py": hashlib.sha256(MODEL_PY).hexdigest()},
        "model_files": {},
    }


def test_promote_of_code_changed_after_approval_is_409(deployer, second_admin) -> None:  # type: ignore[no-untyped-def]
    number = upload_code(token_client(deployer, "deployer"))
    token_client(second_admin, "admin").post(f"/api/models/py/versions/{number}/approve/")
    VersionFile.objects.filter(version__number=number, path="model.py").update(
        blob=BlobFactory(content=b"import socket\n")
    )
    response = token_client(deployer, "deployer").post(f"/api/models/py/versions/{number}/promote/")
    body = assert_error(response, 409, "approved_code_changed")
    assert body["extra"]["changed"] == ["model.py"]
