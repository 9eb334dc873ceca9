"""PostgreSQL ``LISTEN`` on the registry's revision channel, for replicas without Redis.

psycopg's notification wait blocks, so it runs on a daemon thread of its own (never the registry
thread, whose calls it would hold up) and hands each wake-up to the event loop. Its connection
carries the settings' connect timeout and keepalives, so a lost database is noticed and the channel
listened to again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("serving.sources.registry")

POSTGRES_RETRY_S = 5.0
# The connection parameters worth passing on (Django's own; the statement timeout is not needed).
CONNINFO_KEYS = ("dbname", "user", "password", "host", "port", "connect_timeout", "keepalives",
                 "keepalives_idle", "keepalives_interval", "keepalives_count")  # fmt: skip


class PostgresListener:
    """Calls ``wake`` on ``loop`` for every notification on ``channel`` until ``stop``."""

    def __init__(self, params: dict[str, Any], channel: str, wake: Callable[[], None]) -> None:
        self.conninfo = {k: params[k] for k in CONNINFO_KEYS if params.get(k)}
        self.channel = channel
        self.wake = wake
        self._listening = threading.Event()

    def start(self) -> None:
        """Start listening (called on the event loop that ``wake`` belongs to)."""
        loop = asyncio.get_running_loop()
        self._listening.set()
        threading.Thread(
            target=self._listen, args=(loop,), name="registry-notify", daemon=True
        ).start()

    def stop(self) -> None:
        self._listening.clear()

    def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        import psycopg

        while self._listening.is_set():
            try:
                with psycopg.connect(**self.conninfo, autocommit=True) as conn:
                    conn.execute(f'LISTEN "{self.channel}"')
                    logger.info("listening for revisions on PostgreSQL")
                    while self._listening.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            loop.call_soon_threadsafe(self.wake)
            except (psycopg.Error, RuntimeError):
                if self._listening.is_set():
                    logger.warning("PostgreSQL revision notifications lost; polling only a while")
                    time.sleep(POSTGRES_RETRY_S)
