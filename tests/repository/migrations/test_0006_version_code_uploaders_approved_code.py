"""Migration 0006 backfills who uploaded each version's code (carried through config changes)
and the hashes of the files that existing approvals covered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

BEFORE = [("repository", "0005_event_detach_on_delete")]
AFTER = [("repository", "0006_version_code_uploaders_approved_code")]
SHA_PY = "a" * 64
SHA_LABELS = "b" * 64


def migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def before() -> Iterator[Any]:
    apps = migrate(BEFORE)
    yield apps
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def seed(apps: Any) -> dict[str, Any]:
    """The author's code (v1, approved), a deployer's config change of it (v2), and the author's
    config change of that (v3)."""
    user = apps.get_model("auth", "User")
    author, deployer = user.objects.create(username="author"), user.objects.create(username="dep")
    model = apps.get_model("repository", "Model").objects.create(name="py")
    blob = apps.get_model("repository", "Blob")
    py, labels = (
        blob.objects.create(sha256=SHA_PY, size=1),
        blob.objects.create(sha256=SHA_LABELS, size=1),
    )
    version = apps.get_model("repository", "ModelVersion")
    v1 = version.objects.create(
        model=model,
        number=1,
        uploaded_by=author,
        needs_approval=True,
        approved_by=deployer,
        approved_at="2026-11-30T00:00:00Z",
    )
    v2 = version.objects.create(model=model, number=2, uploaded_by=deployer, needs_approval=True)
    v3 = version.objects.create(model=model, number=3, uploaded_by=author, needs_approval=True)
    files = apps.get_model("repository", "VersionFile")
    for v in (v1, v2, v3):
        files.objects.create(version=v, path="model.py", blob=py)
        files.objects.create(version=v, path="labels.txt", blob=labels, model_level=True)
    event = apps.get_model("repository", "Event")
    for source, target in ((1, 2), (2, 3)):
        event.objects.create(
            action="upload",
            model=model,
            model_name="py",
            from_version=source,
            to_version=target,
            detail={"source": "config_change"},
        )
    return {"author": author.pk, "deployer": deployer.pk}


def test_backfill_carries_code_uploaders_through_config_changes_and_keeps_approvals(before) -> None:  # type: ignore[no-untyped-def]
    users = seed(before)
    apps = migrate(AFTER)
    versions = apps.get_model("repository", "ModelVersion").objects.order_by("number")
    uploaders = {v.number: sorted(u.pk for u in v.code_uploaders.all()) for v in versions}
    # v3 was uploaded by the author as a config change of the deployer's change of their code.
    assert uploaders == {1: [users["author"]], 2: [users["author"]], 3: [users["author"]]}
    approved = {v.number: v.approved_code for v in versions}
    code = {"files": {"model.py": SHA_PY}, "model_files": {"labels.txt": SHA_LABELS}}
    assert approved == {1: code, 2: {}, 3: {}}
