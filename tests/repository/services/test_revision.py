"""The serving revision: bumped in the change's transaction and announced only after commit."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.db import connection, transaction

from repository.models import Event
from repository.services import REVISION_CHANNEL, serving_revision_bump, serving_revision_current
from tests.factories import EventFactory


@pytest.mark.django_db(transaction=True)
@pytest.mark.embedded
def test_bump_outside_a_transaction_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError):
        serving_revision_bump()


@pytest.mark.django_db
@pytest.mark.embedded
def test_rolled_back_change_does_not_bump_the_revision() -> None:
    before = serving_revision_current()
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        serving_revision_bump()
        1 / 0  # noqa: B018
    assert serving_revision_current() == before


@pytest.mark.django_db(transaction=True)
def test_revision_is_published_on_redis_after_commit() -> None:
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    pubsub = client.pubsub()
    pubsub.subscribe(REVISION_CHANNEL)
    pubsub.get_message(timeout=2)  # the subscribe confirmation
    with transaction.atomic():
        value = serving_revision_bump()
        assert pubsub.get_message(timeout=0.2) is None  # nothing before commit
    message = pubsub.get_message(timeout=5)
    pubsub.close()
    client.close()
    assert message is not None and int(message["data"]) == value


@pytest.mark.django_db(transaction=True)
def test_revision_is_notified_on_postgresql_after_commit() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    import psycopg

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f'LISTEN "{REVISION_CHANNEL}"')
        with transaction.atomic():
            value = serving_revision_bump()
        deadline = time.monotonic() + 5
        got = []
        while not got and time.monotonic() < deadline:
            got = list(listener.notifies(timeout=1, stop_after=1))
    assert got and got[0].channel == REVISION_CHANNEL and int(got[0].payload) == value


@pytest.mark.django_db
def test_events_are_append_only_in_the_database() -> None:
    event = EventFactory()
    with pytest.raises(ValueError):
        event.save()
    if connection.vendor == "postgresql":
        from django.db import DatabaseError

        with pytest.raises(DatabaseError), transaction.atomic():
            Event.objects.filter(pk=event.pk).update(action="promote")
