"""import_repository / export_repository round trip, and create_token."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from repository.demo_models import write_onnx_mlp, write_python_add_sub
from repository.models import ApiToken, Event, Model, ModelVersion, VersionState
from repository.services import api_token_authenticate, model_version_validate, user_role

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


@pytest.fixture
def fake_check(settings, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"
    settings.PORTICO_VALIDATION_CHECK_MODULE = "tests.repository.validation.fake_check"
    monkeypatch.setenv("FAKE_CHECK", "ok")


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "config.pbtxt"
    }


def test_import_sync_validates_every_version_and_promotes_the_highest(  # type: ignore[no-untyped-def]
    fake_check, model_repo: Path
) -> None:
    write_onnx_mlp(model_repo, name="mlp", version=1)
    write_onnx_mlp(model_repo, name="mlp", version=3)
    write_python_add_sub(model_repo, name="add_sub", version=1)
    out = io.StringIO()
    call_command("import_repository", str(model_repo), sync=True, stdout=out)
    mlp = dict(ModelVersion.objects.filter(model__name="mlp").values_list("number", "state"))
    assert mlp == {1: VersionState.READY, 3: VersionState.PROMOTED}
    # Code nobody vouched for waits for an admin's approval, like an upload.
    add_sub = ModelVersion.objects.get(model__name="add_sub")
    assert add_sub.state == VersionState.READY
    assert add_sub.needs_approval and not add_sub.approved
    assert not Event.objects.filter(action="approve").exists()
    assert "mlp v3: promoted" in out.getvalue()
    assert "add_sub v1: carries code and awaits an admin's approval" in out.getvalue()


def test_import_with_approved_by_approves_the_code_in_that_admins_name(  # type: ignore[no-untyped-def]
    fake_check, model_repo: Path, deployer, registry_admin
) -> None:
    write_python_add_sub(model_repo, name="add_sub", version=1)
    out = io.StringIO()
    call_command(
        "import_repository",
        str(model_repo),
        sync=True,
        uploaded_by=deployer.username,
        approved_by=registry_admin.username,
        stdout=out,
    )
    add_sub = ModelVersion.objects.get(model__name="add_sub")
    assert add_sub.state == VersionState.PROMOTED
    assert (add_sub.uploaded_by, add_sub.approved_by) == (deployer, registry_admin)
    model_py = (model_repo / "add_sub" / "1" / "model.py").read_bytes()
    code = {"files": {"model.py": hashlib.sha256(model_py).hexdigest()}, "model_files": {}}
    assert add_sub.approved_code == code
    vouched = Event.objects.get(action="approve")
    assert (vouched.actor, vouched.to_version) == (registry_admin, 1)
    assert vouched.detail == {"source": "import", **code}
    assert Event.objects.get(action="import").actor == deployer
    assert "add_sub v1: promoted" in out.getvalue()


@pytest.mark.parametrize(
    ("approver", "uploader", "problem"),
    [
        ("ghost", "", "--approved-by ghost: there is no active user of that name"),
        ("deployer", "", "--approved-by deployer: only an admin can vouch for imported code"),
        ("registry-admin", "registry-admin", "a second admin must vouch for it"),
    ],
)
def test_import_refuses_an_approver_who_is_not_a_second_admin_and_stores_nothing(  # type: ignore[no-untyped-def]
    fake_check, model_repo: Path, deployer, registry_admin, approver, uploader, problem
) -> None:
    write_python_add_sub(model_repo, name="add_sub", version=1)
    write_onnx_mlp(model_repo, name="mlp", version=1)
    with pytest.raises(CommandError, match=problem):
        call_command(
            "import_repository",
            str(model_repo),
            sync=True,
            approved_by=approver,
            uploaded_by=uploader,
            stdout=io.StringIO(),
        )
    assert not Model.objects.exists() and not Event.objects.exists()


def test_import_for_the_worker_promotes_plain_models_and_leaves_code_to_approval(  # type: ignore[no-untyped-def]
    fake_check, model_repo: Path
) -> None:
    write_onnx_mlp(model_repo, name="mlp", version=1)
    write_python_add_sub(model_repo, name="add_sub", version=1)
    call_command("import_repository", str(model_repo), stdout=io.StringIO())
    for version in ModelVersion.objects.all():
        model_version_validate(version_id=version.pk)  # as the worker would
    states = dict(ModelVersion.objects.values_list("model__name", "state"))
    assert states == {"mlp": VersionState.PROMOTED, "add_sub": VersionState.READY}


def test_export_writes_promoted_versions_and_round_trips(
    fake_check, model_repo: Path, tmp_path: Path, registry_admin
) -> None:  # type: ignore[no-untyped-def]
    write_onnx_mlp(model_repo, name="mlp", version=2)
    write_python_add_sub(model_repo, name="add_sub", version=1)
    vouch = {"approved_by": registry_admin.username, "stdout": io.StringIO()}
    call_command("import_repository", str(model_repo), sync=True, **vouch)
    exported = tmp_path / "exported"
    call_command("export_repository", str(exported), stdout=io.StringIO())
    assert tree(exported) == tree(model_repo)
    for name in ("mlp", "add_sub"):
        promoted = ModelVersion.objects.get(model__name=name, state=VersionState.PROMOTED)
        assert (exported / name / "config.pbtxt").read_text() == promoted.config_text
    # ...and the export imports again as new versions with the very same blobs.
    call_command("import_repository", str(exported), sync=True, **vouch)
    mlp = ModelVersion.objects.filter(model__name="mlp").order_by("number")
    assert [v.number for v in mlp] == [2, 3]
    first, second = mlp
    assert second.state == VersionState.PROMOTED
    assert sorted(f.blob_id for f in first.files.all()) == sorted(
        f.blob_id for f in second.files.all()
    )


def test_export_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    with pytest.raises(CommandError, match="not empty"):
        call_command("export_repository", str(tmp_path))


def test_import_reports_failed_versions(fake_check, model_repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    write_onnx_mlp(model_repo, name="mlp", version=1)
    monkeypatch.setenv("FAKE_CHECK", "fail-io")
    with pytest.raises(CommandError, match="failed validation"):
        call_command(
            "import_repository",
            str(model_repo),
            sync=True,
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    assert ModelVersion.objects.get().state == VersionState.FAILED


def test_create_token_creates_the_user_and_prints_only_the_key() -> None:
    out = io.StringIO()
    call_command("create_token", "ci-bot", role="deployer", stdout=out)
    key = out.getvalue().strip()
    assert "\n" not in key and len(key) > 30
    token = api_token_authenticate(key=key)
    assert token.user.username == "ci-bot" and token.role == "deployer"
    assert user_role(token.user) == "deployer"
    assert not token.user.has_usable_password()
    assert ApiToken.objects.count() == 1


def test_create_token_may_create_an_admin_token_for_any_user() -> None:
    out = io.StringIO()
    call_command("create_token", "operator-made", role="admin", stdout=out)
    token = api_token_authenticate(key=out.getvalue().strip())
    assert (token.user.username, token.role) == ("operator-made", "admin")


def test_create_token_for_an_application_scopes_it_to_its_models() -> None:
    out = io.StringIO()
    call_command(
        "create_token", "fraud-app", "--role", "invoker", "--models", "fraud,ranker",
        "--expires-days", "7", "--rps", "20", "--max-concurrency", "4", stdout=out,
    )  # fmt: skip
    token = api_token_authenticate(key=out.getvalue().strip())
    assert (token.role, token.model_names) == ("invoker", ["fraud", "ranker"])
    assert (token.rate_limit_rps, token.max_concurrency) == (20, 4)
    assert 6 < (token.expires_at - token.created_at).total_seconds() / 86400 <= 7
    assert user_role(token.user) is None


def test_create_token_says_what_is_wrong_with_an_unscoped_invoker() -> None:
    with pytest.raises(CommandError, match="an invoker token names its models"):
        call_command("create_token", "app", "--role", "invoker", stdout=io.StringIO())
