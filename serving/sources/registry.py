"""``RegistrySource``: serve the registry's promoted versions, following promotes and rollbacks.

The only serving module that touches Django: every ``repository.facade`` call runs on one dedicated
thread (one database connection, never the event loop). The source watches the serving revision
(poll every ``registry_poll_s``, woken early by Redis pub/sub on ``REVISION_CHANNEL`` when
``REDIS_URL`` is set), materialises changed versions into the local cache with sha256 checks (blobs
read straight from S3 or the blob folder, as the registry's ``blob_store`` describes), and
hands the server core frozen plans: load next to the serving version, flip, drain, unload. A
heartbeat row per replica reports what it serves, and when it last saw each inference token.

With inference auth on, the token table follows the same revision on a thread of its own
(``access_follower``), so a revoked token is refused within one wake-up (``redis_listener``,
``postgres_listener``) or poll even while a model is still loading.

Faults: every snapshot read, and every token table, is also kept in a configured cache folder
(``last_snapshot``), so a replica that starts while the database is down serves its last-known
snapshot to the tokens it last knew and catches up when the database answers; a lost database or
Redis only delays heartbeats and revision updates (each retried on its own schedule, every wait
bounded by connect and socket timeouts), never a request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import hashlib
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from repository.config import ConfigError, parse_config_text
from serving.access.guard import AccessGuard
from serving.access.table import AccessTable
from serving.backends.python import launch
from serving.core.devices import gpu_count
from serving.core.model_spec import ModelSpec
from serving.core.model_table import UNLOADED_REASON
from serving.core.placement import replica_config
from serving.core.server import InferenceServer, VersionPlan
from serving.errors import ServingError
from serving.settings import ServingSettings
from serving.sources.access_follower import AccessFollower, access_table
from serving.sources.blob_cache import BlobCache
from serving.sources.blob_reader import BlobOpener, blob_opener
from serving.sources.gpu_check import (
    GpuCheckGate,
    GpuReports,
    placed_on_gpu,
    report_failed_load,
)
from serving.sources.last_snapshot import last_known_snapshot, snapshot_write
from serving.sources.on_demand import idle_versions, least_recently_used
from serving.sources.postgres_listener import PostgresListener
from serving.sources.redis_listener import listen_redis

logger = logging.getLogger("serving.sources.registry")

T = TypeVar("T")

REGISTRY_RETRY_S = 2.0


class RegistrySource:
    """Feeds the server from the registry; explicit load/unload is not offered in this mode."""

    def __init__(self, settings: ServingSettings) -> None:
        self.settings = settings
        self.server: InferenceServer | None = None
        self.replica_id = settings.replica_id or f"{socket.gethostname()}-{os.getpid()}"
        self.started_at = datetime.datetime.now(tz=datetime.UTC)
        self.http_url = settings.advertised_http_url
        self.applied_revision = -1
        self.last_error = ""
        self.from_last_known = False  # serving the kept snapshot until the registry answers
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="registry")
        self._access_executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="registry-access"
        )
        self.access: AccessGuard | None = None
        self.access_follower: AccessFollower | None = None
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._loadable: dict[tuple[str, int], Any] = {}
        self._extra: dict[str, set[int]] = {}
        self._promoted: dict[str, Any] = {}
        self._apply_lock = asyncio.Lock()
        self._postgres_listener: PostgresListener | None = None
        self._gpu_reports: GpuReports = {}  # (model, version) -> {"ok", "message"}
        self._gpu_pending: set[tuple[str, int]] = set()  # placed on a GPU here, still pending
        self._endpoints_known = asyncio.Event()
        self._blob_opener: BlobOpener | None = None
        # Without a configured folder: a private one of this process's own (mkdtemp makes it 0700
        # under an unguessable name), removed when the replica stops.
        self._own_cache = (
            None if settings.cache_dir else tempfile.mkdtemp(prefix="portico-serving-")
        )
        self.cache = BlobCache(Path(settings.cache_dir or str(self._own_cache)), self._open_blob)
        # NOTE: model processes see the whole cache (their own folder included) read-only.
        launch.protect(self.cache.root)

    # -- ModelSource ---------------------------------------------------------------------------

    def set_access_guard(self, guard: AccessGuard) -> None:
        """Keep ``guard``'s token table in step with the registry (called before ``start``)."""
        self.access = guard
        self.access_follower = AccessFollower(
            guard, read_table=self._read_access, read_revision=self._read_access_revision,
            folder=None if self._own_cache is not None else self.cache.root,
            poll_s=self.settings.registry_poll_s,
        )  # fmt: skip

    async def start(self, server: InferenceServer) -> list[str]:
        self.server = server
        server.on_demand = self.load_on_demand
        if self.access_follower is not None:
            await self.access_follower.start()
            self._tasks.append(asyncio.create_task(self.access_follower.follow_forever()))
        try:
            snapshot = await self._read_snapshot()
        except Exception as exc:  # noqa: BLE001 - whatever the database raised, the kept one serves
            snapshot = self._last_known(exc)
        async with self._apply_lock:
            errors = await self._serve(snapshot)
        if self.from_last_known:
            self.last_error = "; ".join(["registry unreachable at start", *errors])
        self._tasks.append(asyncio.create_task(self._watch_forever()))
        self._tasks.append(asyncio.create_task(self._heartbeat_forever()))
        self._tasks.append(asyncio.create_task(self._unload_idle_forever()))
        if self.settings.redis_url:
            self._tasks.append(asyncio.create_task(
                listen_redis(self.settings.redis_url, _revision_channel(), self._wake_all)
            ))  # fmt: skip
        else:
            self._start_postgres_listener()
        return errors

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await self._registry(_close_connection)
        if self.access is not None:
            with contextlib.suppress(Exception):
                await self._registry(_close_connection, executor=self._access_executor)
        if self._postgres_listener is not None:
            self._postgres_listener.stop()
        self._executor.shutdown(wait=False)
        self._access_executor.shutdown(wait=False)
        launch.unprotect(self.cache.root)
        if self._own_cache is not None:
            shutil.rmtree(self._own_cache, ignore_errors=True)

    def model_names(self) -> list[str]:
        return sorted({name for name, _ in self._loadable} | set(self._promoted))

    async def load_model(
        self, name: str, *, config_json: str | None, files: dict[str, bytes]
    ) -> None:  # pragma: no cover - the server refuses explicit control in registry mode
        raise NotImplementedError

    async def unload_model(self, name: str, *, unload_dependents: bool) -> None:  # pragma: no cover
        raise NotImplementedError

    def set_endpoints(self, *, http_port: int | None) -> None:
        """Called once ports are bound: the URL the heartbeat advertises."""
        if not self.http_url and http_port is not None:
            host = self.settings.replica_address or self.settings.host
            if host in ("0.0.0.0", "::", ""):
                host = socket.gethostname()
            scheme = "https" if self.settings.http_tls else "http"
            self.http_url = f"{scheme}://{host}:{http_port}"
        self._endpoints_known.set()

    # -- following the registry ----------------------------------------------------------------

    async def refresh(self) -> list[str]:
        """Read the snapshot and make the server serve it; one message per failed model."""
        async with self._apply_lock:
            return await self._serve(await self._read_snapshot())

    async def _read_snapshot(self) -> Any:
        """The registry's snapshot, also kept in a configured cache folder for the next start."""
        from repository import facade

        snapshot = await self._registry(facade.serving_snapshot)
        self.from_last_known = False
        if self._own_cache is None:
            try:
                text = facade.snapshot_dumps(snapshot)
                await self._registry(snapshot_write, self.cache.root, text)
            except OSError as exc:
                logger.warning("could not keep the registry snapshot: %s", exc)
        return snapshot

    async def _serve(self, snapshot: Any) -> list[str]:
        self._loadable = {(v.model, v.version): v for v in snapshot.loadable}
        self._promoted = {v.model: v for v in snapshot.promoted}
        errors = await self._apply_all()
        self.applied_revision = snapshot.revision
        self.last_error = "; ".join(errors)
        return errors

    def _last_known(self, exc: Exception) -> Any:
        """The registry did not answer at start-up: the snapshot kept by an earlier run."""
        from repository import facade

        folder = None if self._own_cache is not None else self.cache.root
        snapshot = last_known_snapshot(folder, exc, facade.snapshot_loads)
        self.from_last_known = True
        return snapshot

    async def _apply_all(self) -> list[str]:
        server = self._server()
        for name in sorted(set(server.models) - set(self._promoted)):
            logger.info("model '%s' has no promoted version any more; unloading", name)
            self._extra.pop(name, None)
            await server.unload_model(name)
        names = sorted(self._promoted)
        ensembles = [name for name in names if _is_ensemble(self._promoted[name])]
        plain = [name for name in names if name not in ensembles]
        # NOTE: an ensemble's load checks that its composing models are loaded, so ensembles
        # are applied only once every plain model has been.
        results = list(await asyncio.gather(*(self._apply(name) for name in plain)))
        results += await asyncio.gather(*(self._apply(name) for name in ensembles))
        return [error for error in results if error]

    async def _apply(self, name: str) -> str:
        promoted = self._promoted[name]
        extra = {v for v in self._extra.get(name, set()) if (name, v) in self._loadable}
        extra.discard(promoted.version)
        self._extra[name] = extra
        servables = [promoted] + [self._loadable[(name, v)] for v in sorted(extra)]
        plans = [await self._plan(servable) for servable in servables]
        try:
            await self._server().apply_model(name, plans, default_version=promoted.version)
        except ServingError as exc:
            logger.warning("%s", exc.message)
            return exc.message
        keep = {p.spec.model_dir.name for p in plans}
        await self._registry(self.cache.prune, name, keep)
        return ""

    async def load_on_demand(self, name: str, version: int) -> bool:
        """A request named a version that is loadable but not loaded: load it next to the rest,
        first evicting the least recently used extra versions past ``on_demand_max_versions``.

        A failed load changes nothing that serves (all-or-nothing) and is forgotten here, so the
        model's later refreshes (promotes, rollbacks) never carry it.
        """
        limit = self.settings.on_demand_max_versions
        if limit == 0 or (name, version) not in self._loadable or name not in self._promoted:
            return False
        async with self._apply_lock:
            before = set(self._extra.get(name, set()))
            entry = self._server().models.get(name)
            loaded = entry.versions if entry is not None else {}
            evicted = least_recently_used(before - {version}, loaded, keep=limit - 1)
            self._extra[name] = (before - evicted) | {version}
            error = await self._apply(name)
            if error:
                self._extra[name] = before - {version}
        return not error

    async def _unload_idle_forever(self) -> None:
        idle_s = self.settings.on_demand_idle_s
        while True:
            await asyncio.sleep(min(30.0, max(0.05, idle_s / 4)))
            try:
                await self.unload_idle()
            except Exception:  # noqa: BLE001 - retried next pass; the replica keeps serving
                logger.exception("unloading idle on-demand versions failed")

    async def unload_idle(self) -> None:
        """Unload every on-demand version unused for ``on_demand_idle_s``."""
        async with self._apply_lock:
            for name, extra in list(self._extra.items()):
                entry = self._server().models.get(name)
                loaded = entry.versions if entry is not None else {}
                idle = idle_versions(extra, loaded, idle_s=self.settings.on_demand_idle_s)
                if idle and name in self._promoted:
                    logger.info("unloading idle on-demand versions %s of '%s'", sorted(idle), name)
                    self._extra[name] = extra - idle
                    await self._apply(name)

    async def _plan(self, servable: Any) -> VersionPlan:
        fingerprint = _fingerprint(servable)
        key = f"{servable.version}-{fingerprint[:16]}"
        try:
            model_dir = await self._registry(
                self.cache.model_folder, model=servable.model, version=servable.version, key=key,
                files=servable.files, model_files=servable.model_files,
            )  # fmt: skip
            config = await self._registry(self._complete, servable, model_dir)
            error = ""
        except ServingError as exc:
            model_dir, config, error = self.cache.root / "missing", None, exc.message
        except Exception as exc:  # noqa: BLE001 - reported per version, the old one keeps serving
            model_dir, config, error = self.cache.root / "missing", None, f"{exc}"
        if config is None:
            from tritonclient.grpc import model_config_pb2

            config = model_config_pb2.ModelConfig(name=servable.model)
        version_dir = model_dir / str(servable.version)
        spec = ModelSpec(name=servable.model, version=servable.version, config=config,
                         model_dir=model_dir, version_dir=version_dir,
                         cache_dir=self.cache.root / "runtime")  # fmt: skip
        gate = None
        if servable.gpu_check_pending and not error and placed_on_gpu(config):
            self._gpu_pending.add((servable.model, servable.version))
            gate = GpuCheckGate(servable.golden, self._gpu_reports)
        return VersionPlan(spec, fingerprint, error=error, gate=gate)

    def _complete(self, servable: Any, model_dir: Path) -> Any:
        from repository.config import ConfigError, complete_config

        try:
            completed = complete_config(
                servable.config_text,
                model_name=servable.model,
                version_dir=model_dir / str(servable.version),
                gpu_count=None,
            )
        except ConfigError as exc:
            raise ServingError("; ".join(exc.problems) or str(exc)) from None
        # The stored config keeps what the user wrote; this replica's devices decide placement.
        return replica_config(completed.config, gpu_count=gpu_count(self.settings))

    def _open_blob(self, sha256: str) -> Any:
        if self._blob_opener is None:
            from repository import facade

            self._blob_opener = blob_opener(facade.blob_store(), fallback=facade.blob_open)
        return self._blob_opener(sha256)

    # -- background tasks ----------------------------------------------------------------------

    async def _watch_forever(self) -> None:
        from repository import facade

        wait_s = self.settings.registry_poll_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait_s)
            self._wake.clear()
            try:
                revision = await self._registry(facade.serving_revision)
                if revision != self.applied_revision or self.from_last_known:
                    logger.info("registry revision %s (was %s)", revision, self.applied_revision)
                    await self.refresh()
                wait_s = self.settings.registry_poll_s
            except Exception as exc:  # noqa: BLE001 - the replica keeps serving what it has
                # A wake-up that found the registry down is not lost: retry soon, not at the poll.
                wait_s = min(self.settings.registry_poll_s, REGISTRY_RETRY_S)
                self.last_error = f"registry refresh failed: {exc}"
                logger.warning("registry refresh failed (retried in %ss): %s", wait_s, exc)

    def _wake_all(self) -> None:
        self._wake.set()
        if self.access_follower is not None:
            self.access_follower.wake()

    async def _read_access(self) -> AccessTable:
        from repository import facade

        snapshot = await self._registry(facade.access_snapshot, executor=self._access_executor)
        return access_table(snapshot)

    async def _read_access_revision(self) -> int:
        from repository import facade

        return await self._registry(facade.serving_revision, executor=self._access_executor)

    def _start_postgres_listener(self) -> None:
        """Without Redis, PostgreSQL's NOTIFY on the revision channel wakes the watcher."""
        from django.db import connections

        connection = connections["default"]
        if connection.vendor != "postgresql":
            return
        # NOTE: the settings' connect timeout and keepalives too: a lost database is noticed.
        self._postgres_listener = PostgresListener(
            connection.get_connection_params(), _revision_channel(), self._wake_all
        )
        self._postgres_listener.start()

    async def _heartbeat_forever(self) -> None:
        # The first heartbeat waits (a while) for the bound ports, so that the registry never
        # lists this replica without the URL the console reaches it by.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self._endpoints_known.wait(), timeout=self.settings.heartbeat_interval_s
            )
        while True:
            try:
                await self.heartbeat()
            except Exception as exc:  # noqa: BLE001 - a missed heartbeat is retried next interval
                logger.warning("heartbeat failed (retried in %ss): %s",
                               self.settings.heartbeat_interval_s, exc)  # fmt: skip
            await asyncio.sleep(self.settings.heartbeat_interval_s)

    async def heartbeat(self) -> None:
        from repository import facade

        # Versions unloaded on purpose (replaced by a promote) are history, not something served.
        versions = [r for r in self._server().version_rows() if r["reason"] != UNLOADED_REASON]
        for row in versions:
            key = (row["model"], row["version"])
            if key in self._gpu_pending:
                report_failed_load(self._gpu_reports, row)
            if key in self._gpu_reports:
                row["gpu_check"] = self._gpu_reports[key]
        # Token use travels with the heartbeat: one write per token per interval, not per request.
        used = self.access.take_usage() if self.access is not None else {}
        token_use = {token_id: datetime.datetime.fromtimestamp(t, tz=datetime.UTC)
                     for token_id, t in used.items()}  # fmt: skip
        await self._registry(
            facade.replica_heartbeat, replica_id=self.replica_id,
            address=self.http_url.split("//")[-1] or socket.gethostname(), http_url=self.http_url,
            started_at=self.started_at, versions=versions, last_error=self.last_error,
            token_use=token_use,
        )  # fmt: skip

    # -- plumbing ------------------------------------------------------------------------------

    def _server(self) -> InferenceServer:
        assert self.server is not None, "source not started"
        return self.server

    async def _registry(
        self,
        func: Callable[..., T],
        *args: Any,
        executor: concurrent.futures.Executor | None = None,
        **kwargs: Any,
    ) -> T:
        """Run a registry (Django) call on the source's own thread (or the token table's)."""
        loop = asyncio.get_running_loop()

        def call() -> T:
            from django.db import close_old_connections

            close_old_connections()
            return func(*args, **kwargs)

        return await loop.run_in_executor(executor or self._executor, call)


def _close_connection() -> None:
    from django.db import connection

    connection.close()


def _revision_channel() -> str:
    from repository.facade import REVISION_CHANNEL

    return REVISION_CHANNEL


def _is_ensemble(servable: Any) -> bool:
    try:
        return bool(parse_config_text(servable.config_text).platform == "ensemble")
    except ConfigError:
        return False


def _fingerprint(servable: Any) -> str:
    parts = [servable.config_text]
    parts += sorted(f"v:{f.path}:{f.sha256}" for f in servable.files)
    parts += sorted(f"m:{f.path}:{f.sha256}" for f in servable.model_files)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
