"""The per-process dashboard collector: poll every live replica once a second, aggregate, publish.

Started lazily by the first dashboard WebSocket in a console process (``ensure_collector``) and kept
running on that process's event loop. Every console process collects for itself (a few small HTTP
requests per second, so compare and history work wherever a browser lands), but when the Redis
channel layer is shared by several processes only the one holding a short Redis lease publishes to
the ``dashboards`` group, so each browser gets one frame per second.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import uuid
from datetime import timedelta
from typing import Any

import httpx
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.utils import timezone

from console.collector.aggregate import ReplicaSample, aggregate_fleet, strip_histograms
from console.collector.rolling import RollingStore, Selection, TotalsTracker
from console.collector.slo import slo_statuses
from console.collector.sources import (
    ReplicaTarget,
    live_replica_targets,
    slo_targets,
    version_markers,
)
from repository.console_key import console_authorization

logger = logging.getLogger(__name__)

DEFAULT_GROUP = "dashboards"
FRAME_MESSAGE_TYPE = "dashboards.frame"
LIVE_STATS_PATH = "/v2/portico/live-stats"
INTERVAL_S = 1.0
FETCH_TIMEOUT_S = 0.8
HISTORY_S = 15 * 60
COMPARE_SLOT_S = 5.0
# SLOs change rarely: read them again every this many ticks.
SLO_RELOAD_TICKS = 10
LEASE_MS = 3000


def group_name() -> str:
    """The Channels group frames go to (settings ``PORTICO_DASHBOARD_GROUP``, for isolation when
    several consoles that are not one deployment share a Redis, as parallel tests do)."""
    return str(getattr(settings, "PORTICO_DASHBOARD_GROUP", DEFAULT_GROUP))


def compact_point(t: float, frame: dict[str, Any]) -> dict[str, Any]:
    """One history point: per model, the combined numbers the charts plot."""
    models = {}
    for name, model in frame["models"].items():
        combined = model["combined"]
        models[name] = {
            "rps": combined["requests_per_s"],
            "eps": combined["failures_per_s"],
            "queue_depth": combined["queue_depth"],
            "in_flight": combined["in_flight"],
            "replicas_up": model["replicas_up"],
            "latency_us": combined["latency_us"],
        }
    return {"t": t, "models": models}


class _PublishLease:
    """Who publishes when several console processes share the Redis channel layer."""

    def __init__(self, redis_url: str) -> None:
        self._token = uuid.uuid4().hex
        self._key = f"portico:{group_name()}:publisher"
        self._client: Any = None
        if redis_url:
            import redis.asyncio as redis_asyncio

            self._client = redis_asyncio.Redis.from_url(redis_url)

    async def held(self) -> bool:
        if self._client is None:
            return True  # the in-memory layer never leaves this process
        try:
            if await self._client.set(self._key, self._token, nx=True, px=LEASE_MS):
                return True
            if (await self._client.get(self._key)) == self._token.encode():
                await self._client.pexpire(self._key, LEASE_MS)
                return True
            return False
        except Exception:  # Redis down: publish rather than go dark
            logger.warning("dashboard publish lease unavailable", exc_info=True)
            return True

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


class Collector:
    """Polls replicas, keeps the last frame, 15 minutes of history and the rolling compare store."""

    def __init__(
        self, *, interval_s: float = INTERVAL_S, timeout_s: float = FETCH_TIMEOUT_S
    ) -> None:
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.frame: dict[str, Any] | None = None
        self.history: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=int(HISTORY_S / interval_s)
        )
        self.markers: collections.deque[dict[str, Any]] = collections.deque(maxlen=500)
        self.store = RollingStore(slot_s=COMPARE_SLOT_S)
        self.bounds: list[float] = []
        self.ticks = 0
        self._tracker = TotalsTracker()
        self._last_marker_id = 0
        self._task: asyncio.Task[None] | None = None
        self._lease = _PublishLease(getattr(settings, "REDIS_URL", ""))
        self.slos: dict[str, dict[str, Any]] = {}

    @property
    def running(self) -> bool:
        """Running on the current event loop (a task left on a finished loop does not count)."""
        if self._task is None or self._task.done():
            return False
        try:
            return self._task.get_loop() is asyncio.get_running_loop()
        except RuntimeError:
            return False

    def start(self) -> None:
        if not self.running:
            if self._task is not None:  # left on another loop (a restarted server): start afresh
                self._lease = _PublishLease(getattr(settings, "REDIS_URL", ""))
            # NOTE: httpx logs every request at INFO; one line per replica per second is noise.
            logging.getLogger("httpx").setLevel(
                max(logging.WARNING, logging.getLogger("httpx").level)
            )
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dashboards")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif task is not None and not task.get_loop().is_closed():
            task.get_loop().call_soon_threadsafe(task.cancel)
        if task is None or task.get_loop() is asyncio.get_running_loop():
            await self._lease.close()

    async def _run(self) -> None:
        # Live stats name every model and the host: serving asks for a token scoped to all
        # models, and the console sends its own.
        # (publishing the key's hash is a database call: a thread, not the event loop)
        headers = await database_sync_to_async(console_authorization)()
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=headers) as client:
            await self._load_recent_markers()
            while True:
                started = time.monotonic()
                try:
                    await self.tick(client)
                except Exception:  # one bad tick must not end the dashboards
                    logger.exception("dashboard collector tick failed")
                await asyncio.sleep(max(self.interval_s - (time.monotonic() - started), 0.05))

    async def tick(self, client: httpx.AsyncClient) -> dict[str, Any]:
        """Poll, aggregate, remember and publish one frame."""
        targets = await database_sync_to_async(live_replica_targets)()
        samples = await asyncio.gather(*(self._fetch(client, target) for target in targets))
        now = time.time()
        frame = aggregate_fleet(samples)
        self._track(now, samples)
        new_markers = await self._poll_markers()
        if self.ticks % SLO_RELOAD_TICKS == 0:
            self.slos = await database_sync_to_async(slo_targets)()
        slo = slo_statuses(self.store, self.slos, bounds=self.bounds, now=now)
        browser = {**strip_histograms(frame), "time": now, "markers": new_markers, "slo": slo}
        self.frame = browser
        self.history.append(compact_point(now, frame))
        self.ticks += 1
        if await self._lease.held():
            await _publish(browser)
        return browser

    async def _fetch(self, client: httpx.AsyncClient, target: ReplicaTarget) -> ReplicaSample:
        try:
            response = await client.get(target.http_url + LIVE_STATS_PATH)
            response.raise_for_status()
            payload = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            error = str(exc) or type(exc).__name__
            return ReplicaSample(target.replica_id, target.http_url, None, error=error)
        return ReplicaSample(target.replica_id, target.http_url, payload)

    def _track(self, now: float, samples: list[ReplicaSample]) -> None:
        tick = float(round(now))
        deltas: dict[tuple[str, int], Any] = {}
        keys = set()
        for sample in samples:
            if sample.payload is None:
                continue
            started = sample.payload.get("replica", {}).get("started_at", "")
            key = f"{sample.replica_id}@{started}"  # a restarted replica is a new series
            keys.add(key)
            self.bounds = self.bounds or list(sample.payload.get("bucket_bounds_us", []))
            for version_key, delta in self._tracker.deltas(key, sample.payload).items():
                if version_key in deltas:
                    deltas[version_key].add(delta)
                else:
                    deltas[version_key] = delta
        self._tracker.forget_except(keys)
        self.store.add_tick(tick, deltas)

    async def _load_recent_markers(self) -> None:
        since = timezone.now() - timedelta(seconds=HISTORY_S)
        markers = await database_sync_to_async(version_markers)(since=since)
        self._remember(markers)

    async def _poll_markers(self) -> list[dict[str, Any]]:
        markers = await database_sync_to_async(version_markers)(after_id=self._last_marker_id)
        return self._remember(markers)

    def _remember(self, markers: list[Any]) -> list[dict[str, Any]]:
        new = [m.as_dict() for m in markers]
        self.markers.extend(new)
        if markers:
            self._last_marker_id = max(m.id for m in markers)
        return new

    def compare(self, a: Selection, b: Selection) -> dict[str, Any]:
        """Two selections summarised side by side (p95, throughput, queue time)."""
        return {
            "a": self.store.summarize(a, bounds=self.bounds),
            "b": self.store.summarize(b, bounds=self.bounds),
            "versions": self.store.versions(a.model),
            "span": self.store.span(a.model),
        }

    def backfill(self, model: str | None = None) -> dict[str, Any]:
        """What a newly connected browser needs to draw its charts at once."""
        points = list(self.history)
        if model is not None:
            points = [
                {"t": p["t"], "models": {model: p["models"][model]}}
                for p in points
                if model in p["models"]
            ]
        markers = [m for m in self.markers if model is None or m["model"] == model]
        return {"points": points, "markers": markers}


async def _publish(frame: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group_name(), {"type": FRAME_MESSAGE_TYPE, "frame": frame})


_COLLECTOR: Collector | None = None


def get_collector() -> Collector:
    global _COLLECTOR
    if _COLLECTOR is None:
        _COLLECTOR = Collector()
    return _COLLECTOR


def ensure_collector() -> Collector:
    """The process's collector, started on the running loop if it is not running yet."""
    collector = get_collector()
    collector.start()
    return collector


async def reset_collector() -> None:
    """Stop and forget the process's collector (tests, shutdown)."""
    global _COLLECTOR
    if _COLLECTOR is not None:
        await _COLLECTOR.stop()
        _COLLECTOR = None
