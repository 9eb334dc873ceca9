"""Redis pub/sub on the registry's revision channel: wakes a replica the moment something changes.

Only a wake-up: what changed is read from the registry, and a lost message costs one poll interval.
A Redis that stops answering is noticed by the health-check PING (or a socket timeout) and the
channel subscribed again, never waited on forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

logger = logging.getLogger("serving.sources.registry")

# A Redis that stops answering is given up on after this long (connect, read, health-check PING).
REDIS_TIMEOUT_S = 5.0
REDIS_RETRY_S = 2.0


async def listen_redis(url: str, channel: str, wake: Callable[[], None]) -> None:
    """Call ``wake`` for every message on ``channel``, until cancelled; a lost connection is
    retried every ``REDIS_RETRY_S``."""
    import redis.asyncio as redis
    from redis.exceptions import RedisError

    while True:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S,
            socket_keepalive=True, health_check_interval=REDIS_TIMEOUT_S,
        )  # fmt: skip
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(channel)
                logger.info("listening for revisions on Redis")
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None and message.get("type") == "message":
                        wake()
        except (RedisError, OSError) as exc:
            logger.warning("Redis revision channel lost (%s); polling until it is back", exc)
        finally:
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()
        await asyncio.sleep(REDIS_RETRY_S)
