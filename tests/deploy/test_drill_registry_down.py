"""Drills: the database or Redis goes away. A replica starts from its last-known snapshot (and
token table) while PostgreSQL is down and catches up when it returns; PostgreSQL or Redis lost while
serving fails no request, and heartbeats and revision updates resume by themselves.

"Down" is a TCP proxy in front of the machine's PostgreSQL and Redis that the test stops (listener
closed, every connection dropped) and starts again; the servers themselves are never touched.
A replica with no kept snapshot (or an unreadable one) meets a port nothing listens on instead,
which needs no PostgreSQL, so those two run on the embedded default too. So does the token drill:
there, the SQLite file is reached through a link to its folder that the test removes and puts back.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.loopback import Load, LoopbackProxy, http_status, infer, serve, wait_until
from tests.ports import free_port
from tests.serving.access.test_inference_auth import token
from tests.serving.sources.test_registry import identity_onnx, promote, registry_version, retrying

pytestmark = pytest.mark.django_db(transaction=True)

REPLICA_ID = "drill-replica"
POSTGRES_PORT = 5432
REDIS_PORT = 6379


@pytest.fixture
def postgres() -> Iterator[LoopbackProxy]:
    from django.db import connection

    if connection.vendor != "postgresql" or not os.environ.get("REDIS_URL"):
        pytest.skip("needs PostgreSQL and Redis: 'down' is a proxy in front of them")
    proxy = LoopbackProxy([int(connection.settings_dict["PORT"] or POSTGRES_PORT)]).start()
    yield proxy
    proxy.close()


@pytest.fixture
def redis() -> Iterator[LoopbackProxy]:
    proxy = LoopbackProxy([REDIS_PORT]).start()
    yield proxy
    proxy.close()


class SqliteFolder:
    """The embedded default's "down": the replica reaches the SQLite file through a link to its
    folder, which ``stop`` removes (nothing can be opened there) and ``start`` puts back."""

    def __init__(self, tmp_path: Path) -> None:
        from django.db import connection

        database = Path(connection.settings_dict["NAME"])
        self.link = tmp_path / "database"
        self.folder = database.parent
        self.url = f"sqlite:///{self.link / database.name}"
        self.start()

    def stop(self) -> None:
        self.link.unlink()

    def start(self) -> None:
        self.link.symlink_to(self.folder, target_is_directory=True)


Outage = LoopbackProxy | SqliteFolder


@pytest.fixture(params=["postgres", pytest.param("sqlite", marks=pytest.mark.embedded)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    """What stands between a replica and its database, stopped and started by the test."""
    from django.db import connection

    if request.param == "postgres":
        yield request.getfixturevalue("postgres")
    elif connection.vendor != "sqlite":
        pytest.skip("the SQLite outage needs the embedded default")
    else:
        yield SqliteFolder(tmp_path)


class Replica:
    """A registry-backed serving process reaching its database (and Redis) through an outage
    the test controls: the proxies, or the SQLite folder's link."""

    def __init__(
        self, tmp_path: Path, database: Outage, redis_url: str = "", auth: str = "off"
    ) -> None:
        from django.conf import settings
        from django.db import connection

        db = connection.settings_dict
        self.port = free_port()
        self.log = tmp_path / "replica.log"
        self.cache = tmp_path / "cache"
        if isinstance(database, SqliteFolder):
            database_url = database.url
        else:
            database_url = f"postgres://{db['USER']}@127.0.0.1:{database.port}/{db['NAME']}"
        self.env = {
            "DJANGO_SETTINGS_MODULE": "console.settings.serving",
            # Loopback only; tokens are drilled where they are the subject.
            "PORTICO_INFERENCE_AUTH": auth,
            "DATABASE_URL": database_url,
            "PORTICO_DB_CONNECT_TIMEOUT_S": "2",
            "PORTICO_BLOB_DIR": settings.STORAGES["blobs"]["OPTIONS"]["location"],
            "REDIS_URL": redis_url,
            "SERVING_CACHE_DIR": str(self.cache),
            "SERVING_REPLICA_ID": REPLICA_ID,
            "SERVING_HEARTBEAT_SECS": "0.5",
            # Without Redis a short poll; with it a long one, so an update seen early came through
            # the Redis channel.
            "SERVING_REGISTRY_POLL_SECS": "600" if redis_url else "0.5",
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        args = ["--host", "127.0.0.1", "--http-port", str(self.port), "--grpc-port", "-1",
                "--metrics-port", "-1", "--drain-grace-secs", "0"]  # fmt: skip
        self.process = serve(args, self.log, **self.env)
        return wait_until(self.ready, "replica ready", timeout_s=120, log=self.log)

    def ready(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.output()
        return http_status(self.port, "/v2/health/ready") == 200

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def version_served(self) -> str:
        return str(infer(self.port)["model_version"])

    def status(self, token: str, model: str = "identity") -> int:
        """The HTTP status of an inference with ``token``."""
        try:
            infer(self.port, model, token=token)
        except RuntimeError as exc:
            return int(str(exc).split()[1].rstrip(":"))
        return 200


def heartbeat_since(moment: datetime) -> bool:
    from repository.models import ServingReplica

    return ServingReplica.objects.filter(replica_id=REPLICA_ID, last_seen__gt=moment).exists()


def identity_versions(tmp_path: Path, count: int) -> list[Any]:
    onnx, config = identity_onnx(tmp_path)
    return [registry_version("identity", n, onnx, config) for n in range(1, count + 1)]


def now() -> datetime:
    from django.utils import timezone

    return timezone.now()


def test_replica_starts_from_its_last_known_snapshot_while_postgres_is_down(
    tmp_path: Path, postgres: LoopbackProxy
) -> None:
    v1, v2 = identity_versions(tmp_path, 2)
    promote(v1)
    replica = Replica(tmp_path, postgres)
    try:
        replica.start()
        assert replica.version_served() == "1"
        kept = replica.cache / "registry-snapshot.json"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        replica.stop()

        postgres.stop()
        start_s = replica.start()
        assert replica.version_served() == "1"
        assert "serving the last-known snapshot (revision" in replica.output()

        promote(v2)  # while the replica cannot see the database
        back = now()
        postgres.start()
        heartbeat_s = wait_until(lambda: heartbeat_since(back), "heartbeat after PostgreSQL",
                                 log=replica.log)  # fmt: skip
        update_s = wait_until(lambda: replica.version_served() == "2", "v2 after PostgreSQL",
                              log=replica.log)  # fmt: skip
    finally:
        replica.kill()
    print(f"\nPostgreSQL down at start: ready from the kept snapshot in {start_s:.1f} s; after "
          f"it returned, heartbeat in {heartbeat_s:.1f} s, "
          f"promoted v2 served in {update_s:.1f} s")  # fmt: skip


def test_replica_started_while_the_database_is_down_accepts_the_tokens_it_kept(
    tmp_path: Path, database: Outage
) -> None:
    from repository.services import api_token_revoke
    from serving.access.table import key_hash

    # With Redis (next to PostgreSQL) the poll is 600 s: what is refused early came through the
    # retry after the database returned, not a poll.
    redis_url = os.environ["REDIS_URL"] if isinstance(database, LoopbackProxy) else ""
    (v1,) = identity_versions(tmp_path, 1)
    promote(v1)
    _, kept = token(models=["identity"])
    revoked_row, revoked = token(models=["identity"])
    _, elsewhere = token(models=["other"])
    replica = Replica(tmp_path, database, redis_url=redis_url, auth="required")
    try:
        replica.start()
        wait_until(lambda: replica.status(kept) == 200, "token accepted", log=replica.log)
        table = replica.cache / "access-snapshot.json"
        assert stat.S_IMODE(table.stat().st_mode) == 0o600
        text = table.read_text()
        assert key_hash(kept) in text and kept not in text and revoked not in text
        replica.stop()

        database.stop()
        start_s = replica.start()
        assert "serving the kept one (revision" in replica.output()
        assert replica.status(kept) == 200
        assert replica.status(revoked) == 200  # not revoked yet
        assert replica.status("u" * 43) == 401
        assert replica.status(elsewhere) == 403
        assert replica.status("") == 401

        # Revoked while the replica cannot see the database: the Redis message (if any) that
        # wakes it finds the database down.
        retrying(lambda: api_token_revoke(token=revoked_row, actor=revoked_row.user))
        database.start()
        refused_s = wait_until(lambda: replica.status(revoked) == 401, "revoked token refused",
                               log=replica.log)  # fmt: skip
        assert replica.status(kept) == 200
        assert replica.status(elsewhere) == 403
    finally:
        replica.kill()
    kind = "PostgreSQL with Redis (poll 600 s)" if redis_url else "SQLite (poll 0.5 s)"
    print(f"\n{kind} down at start, auth required: ready from the kept snapshot and token table "
          f"in {start_s:.1f} s; a token revoked meanwhile refused {refused_s:.1f} s after the "
          "database returned")  # fmt: skip


def start_with_no_database(tmp_path: Path, snapshot: str | None) -> tuple[int, str]:
    """A replica whose PostgreSQL refuses every connection (nothing listens on its port), with
    ``snapshot`` kept in its cache folder; its exit code and output."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    if snapshot is not None:
        (cache / "registry-snapshot.json").write_text(snapshot)
    log = tmp_path / "replica.log"
    args = ["--host", "127.0.0.1", "--http-port", str(free_port()), "--grpc-port", "-1",
            "--metrics-port", "-1"]  # fmt: skip
    process = serve(args, log, DJANGO_SETTINGS_MODULE="console.settings.serving",
                    DATABASE_URL=f"postgres://portico@127.0.0.1:{free_port()}/portico",
                    SERVING_CACHE_DIR=str(cache), REDIS_URL="",
                    PORTICO_INFERENCE_AUTH="off")  # fmt: skip
    return process.wait(timeout=120), log.read_text(errors="replace")


@pytest.mark.embedded
def test_replica_without_a_kept_snapshot_exits_while_postgres_is_down(tmp_path: Path) -> None:
    code, output = start_with_no_database(tmp_path, snapshot=None)
    assert code == 1
    assert "no last-known snapshot to start from" in output


@pytest.mark.embedded
def test_replica_with_an_unreadable_kept_snapshot_exits_saying_so(tmp_path: Path) -> None:
    code, output = start_with_no_database(tmp_path, snapshot='{"revision": ')
    assert code == 1
    assert "last-known snapshot in" in output and "is unreadable" in output


def test_postgres_then_redis_down_while_serving_fail_no_request(
    tmp_path: Path, postgres: LoopbackProxy, redis: LoopbackProxy
) -> None:
    database = os.environ["REDIS_URL"].rsplit("/", 1)[-1]
    v1, v2, v3 = identity_versions(tmp_path, 3)
    promote(v1)
    replica = Replica(tmp_path, postgres, redis_url=f"redis://127.0.0.1:{redis.port}/{database}")
    try:
        replica.start()
        with Load(replica.port, clients=2) as load:
            load.wait_for_requests(30)
            wait_until(lambda: "listening for revisions on Redis" in replica.output(),
                       "subscribed", log=replica.log)  # fmt: skip
            postgres.stop()
            promote(v2)  # the Redis message wakes the replica; the database does not answer
            wait_until(lambda: "registry refresh failed" in replica.output(), "refresh refused",
                       log=replica.log)  # fmt: skip
            load.wait_for_requests(30)
            back = now()
            postgres.start()
            pg_heartbeat_s = wait_until(lambda: heartbeat_since(back), "heartbeat after PostgreSQL",
                                        log=replica.log)  # fmt: skip
            pg_update_s = wait_until(lambda: load.versions["2"] > 0, "v2 after PostgreSQL",
                                     log=replica.log)  # fmt: skip

            redis.stop()
            load.wait_for_requests(30)
            redis.start()
            wait_until(lambda: replica.output().count("listening for revisions on Redis") >= 2,
                       "subscribed again", log=replica.log)  # fmt: skip
            promoted_at = time.monotonic()
            promote(v3)
            wait_until(lambda: load.versions["3"] > 0, "v3 after Redis", log=replica.log)
            redis_update_s = time.monotonic() - promoted_at
            load.wait_for_requests(30)
    finally:
        replica.kill()
    assert load.failures == []
    print(f"\nPostgreSQL then Redis down while serving: {load.ok} requests, "
          f"{len(load.failures)} failed; after PostgreSQL returned, heartbeat in "
          f"{pg_heartbeat_s:.1f} s and v2 served in {pg_update_s:.1f} s; after Redis returned, "
          f"v3 served {redis_update_s:.1f} s after its promote (poll: 600 s)")  # fmt: skip
