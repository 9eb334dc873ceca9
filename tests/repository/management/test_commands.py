"""import_repository / export_repository round trip, and create_token."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from repository.demo_models import write_onnx_mlp, write_python_add_sub
from repository.models import ApiToken, ModelVersion, VersionState
from repository.services import api_token_authenticate, user_role

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
    add_sub = ModelVersion.objects.get(model__name="add_sub")
    assert add_sub.state == VersionState.PROMOTED  # imported code is trusted: approved on import
    assert add_sub.needs_approval and add_sub.approved
    assert "mlp v3: promoted" in out.getvalue()


def test_export_writes_promoted_versions_and_round_trips(
    fake_check, model_repo: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    write_onnx_mlp(model_repo, name="mlp", version=2)
    write_python_add_sub(model_repo, name="add_sub", version=1)
    call_command("import_repository", str(model_repo), sync=True, stdout=io.StringIO())
    exported = tmp_path / "exported"
    call_command("export_repository", str(exported), stdout=io.StringIO())
    assert tree(exported) == tree(model_repo)
    for name in ("mlp", "add_sub"):
        promoted = ModelVersion.objects.get(model__name=name, state=VersionState.PROMOTED)
        assert (exported / name / "config.pbtxt").read_text() == promoted.config_text
    # ...and the export imports again as new versions with the very same blobs.
    call_command("import_repository", str(exported), sync=True, stdout=io.StringIO())
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


def test_demo_repository_imports_with_the_real_check_and_every_model_is_promoted(  # type: ignore[no-untyped-def]
    settings, tmp_path: Path, model_repo: Path
) -> None:
    from repository.demo_models import write_demo_repository

    settings.UPLOAD_DIR = tmp_path / "uploads"
    write_demo_repository(model_repo)
    out = io.StringIO()
    call_command("import_repository", str(model_repo), sync=True, stdout=out)
    versions = ModelVersion.objects.select_related("model")
    assert {v.model.name: v.state for v in versions} == {
        name: VersionState.PROMOTED for name in ("mlp", "preprocess", "pipeline")
    }, out.getvalue()
    assert all(v.config_text for v in versions)


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
