"""The serving revision: bumped with every change to what is served; announced on commit."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from repository.models import ServingRevision

logger = logging.getLogger(__name__)

# Redis pub/sub channel and PostgreSQL NOTIFY channel that carry the new revision number.
REVISION_CHANNEL = "portico:revision"


def serving_revision_bump() -> int:
    """Increment the revision inside the caller's transaction and announce it once that commits.

    The UPDATE row-locks the counter until commit, so concurrent changes get distinct, ordered
    revisions.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("serving_revision_bump must run inside the change's transaction")
    updated = ServingRevision.objects.filter(pk=1).update(value=F("value") + 1)
    if not updated:
        # NOTE: the data migration creates the row; flushed test databases may lack it.
        ServingRevision.objects.get_or_create(pk=1, defaults={"value": 0})
        ServingRevision.objects.filter(pk=1).update(value=F("value") + 1)
    value = ServingRevision.objects.values_list("value", flat=True).get(pk=1)
    if connection.vendor == "postgresql":
        # NOTIFY inside the transaction is delivered by PostgreSQL only when it commits.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [REVISION_CHANNEL, str(value)])
    transaction.on_commit(lambda: revision_publish(value))
    return value


def serving_revision_current() -> int:
    row = ServingRevision.objects.filter(pk=1).values_list("value", flat=True).first()
    return int(row or 0)


def revision_publish(value: int) -> None:
    """Publish the revision on Redis when configured; failures are logged (replicas also poll)."""
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.publish(REVISION_CHANNEL, str(value))
        finally:
            client.close()
    except redis.RedisError:
        logger.warning("could not publish serving revision %s on Redis", value, exc_info=True)
