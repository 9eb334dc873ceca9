"""Invariants the database itself enforces."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction

from repository.models import Blob, Event, ModelVersion, VersionFile
from repository.services import event_record
from tests.factories import BlobFactory, ModelFactory, ModelVersionFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.embedded
@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "a/..", ""])
def test_version_file_paths_must_stay_inside_the_folder(path: str) -> None:
    version = ModelVersionFactory()
    blob = BlobFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        VersionFile.objects.create(version=version, path=path, blob=blob)


@pytest.mark.embedded
def test_blob_hash_must_be_lowercase_hex() -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Blob.objects.create(sha256="NOT-A-HASH", size=1)


@pytest.mark.embedded
def test_model_names_are_safe_path_segments() -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelFactory(name="../evil")


@pytest.mark.embedded
def test_version_numbers_start_at_one() -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelVersionFactory(number=0)


def test_blobs_are_immutable_on_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the trigger is PostgreSQL's")
    blob = BlobFactory()
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        Blob.objects.filter(pk=blob.pk).update(size=blob.size + 1)


@pytest.mark.embedded
def test_version_state_outside_the_choices_is_refused() -> None:
    version = ModelVersionFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelVersion.objects.filter(pk=version.pk).update(state="deleted")


def test_events_are_append_only_on_postgresql_but_a_deleted_user_detaches() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the trigger is PostgreSQL's")
    user = UserFactory(username="leaver")
    event = event_record(actor=user, action="upload", model=ModelFactory(name="kept"))
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        Event.objects.filter(pk=event.pk).update(action="promote")
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        Event.objects.filter(pk=event.pk).update(actor=None, actor_name="someone else")
    with (
        pytest.raises(DatabaseError, match="immutable"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("DELETE FROM repository_event WHERE id = %s", [event.pk])
    user.delete()
    event = Event.objects.get(pk=event.pk)
    assert (event.actor_id, event.actor_name, event.model_name) == (None, "leaver", "kept")
