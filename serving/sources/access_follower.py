"""Keeps an ``AccessGuard``'s token table in step with the registry's revision, and on disk.

The registry source runs it on a registry thread of its own, so a revoked token is refused within
one wake-up (Redis, PostgreSQL NOTIFY) or poll even while a model is still loading.

Each table the registry gives is also kept next to the registry snapshot (``last_snapshot``: key
hashes, scopes, quotas and expiries, never a key). A replica that starts while the database cannot
be reached serves the kept table, so the tokens it accepted before still work (an expired one is
still refused by its expiry); it asks the registry again every ``ACCESS_RETRY_S`` and swaps the kept
table for the registry's the moment the database answers, so a token revoked meanwhile stops working
then. With no table kept (or an unreadable one) every token is refused until then: it fails closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from serving.access.guard import AccessGuard
from serving.access.table import AccessTable, TokenGrant, table_dumps, table_loads
from serving.sources.last_snapshot import ACCESS_NAME, snapshot_read, snapshot_write

logger = logging.getLogger("serving.sources.registry")

# While the registry does not answer, it is asked again this often (not every poll interval), so a
# token revoked during an outage is refused about a second after the database returns.
ACCESS_RETRY_S = 1.0


class AccessFollower:
    """Serves the registry's token table through ``guard``, reading it with ``read_table`` when
    ``read_revision`` moves; ``folder`` (None: nothing kept) holds the kept copy."""

    def __init__(
        self,
        guard: AccessGuard,
        *,
        read_table: Callable[[], Awaitable[AccessTable]],
        read_revision: Callable[[], Awaitable[int]],
        folder: Path | None,
        poll_s: float,
    ) -> None:
        self.guard = guard
        self.read_table = read_table
        self.read_revision = read_revision
        self.folder = folder
        self.poll_s = poll_s
        self.from_last_known = False  # the kept table serves until the registry answers
        self._answering = False  # the registry's last answer came through
        self._kept_revision: int | None = None
        self._wake = asyncio.Event()

    async def start(self) -> None:
        """Serve the registry's table, or the kept one when the registry cannot be reached."""
        try:
            await self.refresh()
        except Exception as exc:  # noqa: BLE001 - whatever the database raised, the kept one serves
            self._serve_kept(exc)

    def wake(self) -> None:
        """The revision may have moved: look now instead of at the next poll."""
        self._wake.set()

    async def refresh(self) -> None:
        """Read the registry's table, serve it, and keep it when its revision is new."""
        table = await self.read_table()
        self.guard.replace(table)
        self.from_last_known = False
        self._answering = True
        if self.folder is not None and table.revision != self._kept_revision:
            try:
                text = table_dumps(table)
                await asyncio.to_thread(snapshot_write, self.folder, text, ACCESS_NAME)
                self._kept_revision = table.revision
            except OSError as exc:
                logger.warning("could not keep the token table: %s", exc)

    async def follow_forever(self) -> None:
        while True:
            wait_s = self.poll_s if self._answering else min(self.poll_s, ACCESS_RETRY_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait_s)
            self._wake.clear()
            try:
                if self.from_last_known:
                    # The kept table may name a token revoked meanwhile: replace it whatever the
                    # revision says.
                    await self.refresh()
                    logger.info("the registry answers; the kept token table is replaced")
                elif await self.read_revision() != self.guard.table.revision:
                    await self.refresh()
                self._answering = True
            except Exception as exc:  # noqa: BLE001 - the replica keeps the table it has
                self._answering = False
                logger.warning("token table refresh failed (retried in %ss): %s",
                               min(self.poll_s, ACCESS_RETRY_S), exc)  # fmt: skip

    def _serve_kept(self, exc: Exception) -> None:
        self._answering = False
        text = None if self.folder is None else snapshot_read(self.folder, ACCESS_NAME)
        if text is None:
            logger.warning("the token table is unreachable (%s) and none is kept; every token is "
                           "refused until the registry answers", exc)  # fmt: skip
            return
        try:
            table = table_loads(text)
        except (ValueError, KeyError, TypeError) as bad:
            logger.warning("the token table is unreachable (%s) and the kept one is unreadable "
                           "(%r); every token is refused until the registry answers",
                           exc, bad)  # fmt: skip
            return
        self.guard.replace(table)
        self.from_last_known = True
        logger.warning("the token table is unreachable (%s); serving the kept one (revision %s, "
                       "%d tokens) until the registry answers", exc, table.revision,
                       len(table.by_hash))  # fmt: skip


def access_table(snapshot: Any) -> AccessTable:
    """The guard's table for the registry's ``AccessSnapshot``."""
    grants = (
        TokenGrant(
            token_id=t.token_id,
            prefix=t.prefix,
            key_hash=t.key_hash,
            models=None if t.models is None else frozenset(t.models),
            may_infer=t.may_infer,
            expires_at=None if t.expires_at is None else t.expires_at.timestamp(),
            rate_limit_rps=t.rate_limit_rps,
            max_concurrency=t.max_concurrency,
        )  # fmt: skip
        for t in snapshot.tokens
    )
    return AccessTable.of(snapshot.revision, grants)
