"""``AccessFollower``: the token table kept next to the registry snapshot, served while the registry
cannot be reached, replaced the moment it answers. (The same through a real replica, PostgreSQL and
Redis: ``tests/deploy/test_drill_registry_down.py``.)"""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path

import pytest

from serving.access.errors import PermissionDeniedError, UnauthenticatedError
from serving.access.guard import AccessGuard
from serving.access.table import AccessTable, Need, TokenGrant, key_hash, table_dumps, table_loads
from serving.sources.access_follower import AccessFollower
from serving.sources.last_snapshot import ACCESS_NAME, snapshot_write

KEY, REVOKED, EXPIRED = "k" * 43, "r" * 43, "e" * 43


def grant(key: str, token_id: int, **fields: object) -> TokenGrant:
    values: dict[str, object] = {"models": frozenset({"fraud"}), "may_infer": True, **fields}
    return TokenGrant(token_id=token_id, prefix=key[:8], key_hash=key_hash(key), **values)  # type: ignore[arg-type]


TABLE = AccessTable.of(7, [
    grant(KEY, 1, rate_limit_rps=5.0, max_concurrency=2),
    grant(REVOKED, 2, models=None),
    grant(EXPIRED, 3, expires_at=time.time() + 0.5),
])  # fmt: skip


class Registry:
    """What the follower reads: a table, or an error while "the database" is unreachable."""

    def __init__(self, table: AccessTable) -> None:
        self.table = table
        self.down = False

    async def read_table(self) -> AccessTable:
        if self.down:
            raise ConnectionRefusedError("connection refused")
        return self.table

    async def read_revision(self) -> int:
        return (await self.read_table()).revision


def follower(registry: Registry, folder: Path | None) -> AccessFollower:
    return AccessFollower(AccessGuard(), read_table=registry.read_table,
                          read_revision=registry.read_revision, folder=folder,
                          poll_s=600.0)  # fmt: skip


def admit(guard: AccessGuard, key: str, model: str = "fraud") -> None:
    guard.admit(f"Bearer {key}", Need.INFER, model)


def test_a_table_round_trips_as_hashes_scopes_quotas_and_expiries_only() -> None:
    text = table_dumps(TABLE)
    assert table_loads(text) == TABLE
    assert KEY not in text and REVOKED not in text and key_hash(KEY) in text
    with pytest.raises(ValueError, match="not a sha256 key hash"):
        table_loads(text.replace(key_hash(KEY), KEY))


def test_the_registrys_table_is_kept_private_and_replaced_whole(tmp_path: Path) -> None:
    registry = Registry(TABLE)
    asyncio.run(follower(registry, tmp_path).start())
    kept = tmp_path / ACCESS_NAME
    assert table_loads(kept.read_text()) == TABLE
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600

    registry.table = AccessTable.of(8, [grant(KEY, 1)])
    asyncio.run(follower(registry, tmp_path).start())
    assert table_loads(kept.read_text()).revision == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == [ACCESS_NAME]  # no partial file left


def test_unreachable_registry_serves_the_kept_table_until_it_answers(tmp_path: Path) -> None:
    registry = Registry(TABLE)
    asyncio.run(follower(registry, tmp_path).start())

    async def drill() -> None:
        registry.down = True
        cut_off = follower(registry, tmp_path)
        await cut_off.start()
        guard = cut_off.guard
        assert cut_off.from_last_known
        admit(guard, KEY)
        admit(guard, REVOKED, "ranker")
        with pytest.raises(UnauthenticatedError, match="unknown or revoked"):
            admit(guard, "u" * 43)
        with pytest.raises(PermissionDeniedError):
            admit(guard, KEY, "ranker")
        await asyncio.sleep(max(0.0, TABLE.by_hash[key_hash(EXPIRED)].expires_at - time.time()))
        with pytest.raises(UnauthenticatedError, match="expired"):
            admit(guard, EXPIRED)

        # Revoked while cut off, at the same revision the kept table has: still replaced.
        registry.table = AccessTable.of(TABLE.revision, [grant(KEY, 1)])
        following = asyncio.create_task(cut_off.follow_forever())
        registry.down = False
        deadline = time.monotonic() + 30
        while cut_off.from_last_known:
            assert time.monotonic() < deadline, "the kept table was never replaced"
            await asyncio.sleep(0.05)
        following.cancel()
        admit(guard, KEY)
        with pytest.raises(UnauthenticatedError, match="unknown or revoked"):
            admit(guard, REVOKED, "ranker")

    asyncio.run(drill())
    assert table_loads((tmp_path / ACCESS_NAME).read_text()) == registry.table


@pytest.mark.parametrize("kept", [None, '{"revision": ', "no folder"])
def test_without_a_readable_kept_table_every_token_is_refused(tmp_path: Path, kept: str) -> None:
    if kept not in (None, "no folder"):
        snapshot_write(tmp_path, kept, ACCESS_NAME)
    registry = Registry(TABLE)
    registry.down = True
    cut_off = follower(registry, None if kept == "no folder" else tmp_path)
    asyncio.run(cut_off.start())
    assert not cut_off.from_last_known
    with pytest.raises(UnauthenticatedError):
        admit(cut_off.guard, KEY)
