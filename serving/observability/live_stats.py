"""Compact live statistics for one serving replica, polled by the console every second.

``ModelStatistics`` is cumulative. A short ring of cumulative snapshots per loaded version (one per
second, taken by ``sample_forever`` on the serving loop or lazily when the endpoint is polled) turns
it into windows by diffing: requests/s, latency percentiles over the last 10 s and 60 s, batch-size
mix, batch release reasons and errors by reason. Each window carries its raw histogram bucket
counts, and each version its cumulative totals, so the console can merge replicas exactly instead of
averaging percentiles. A snapshot copies a few short lists under the statistics lock: microseconds.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import os
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from serving.core.statistics import LATENCY_BUCKET_BOUNDS_US, PHASES, ModelStatistics
from serving.observability import system_metrics

WINDOWS_S = (10, 60)
SNAPSHOT_INTERVAL_S = 1.0
# Snapshots closer together than this are not stored (a busy poller must not flush the ring).
MIN_SNAPSHOT_SPACING_S = 0.5
RING_SECONDS = max(WINDOWS_S) + 5
QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
# Phases shown in the window summaries; every phase's histogram is shipped.
SUMMARY_PHASES = PHASES

_STARTED_AT = time.time()


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """Cumulative counters of one model version at monotonic time ``t`` (seconds)."""

    t: float
    success: int
    fail: int
    inferences: int
    executions: int
    failures_by_reason: dict[str, int]
    histograms: dict[str, tuple[int, ...]]
    sums_us: dict[str, float]
    batch_executions: dict[int, int]
    release_reasons: dict[str, int]


def take_snapshot(stats: ModelStatistics, *, now: float | None = None) -> Snapshot:
    """Copy the cumulative counters of ``stats`` consistently."""
    # NOTE: the schedulers record under this lock; holding it while copying keeps the histograms
    # and counts of one snapshot consistent with each other.
    with stats.lock:
        return Snapshot(
            t=time.monotonic() if now is None else now,
            success=stats.success.count,
            fail=stats.fail.count,
            inferences=stats.inference_count,
            executions=stats.execution_count,
            failures_by_reason=dict(stats.failures_by_reason),
            histograms={p: tuple(h.counts) for p, h in stats.histograms.items()},
            sums_us={p: h.sum_us for p, h in stats.histograms.items()},
            batch_executions={s: b.compute_infer.count for s, b in stats.batch_stats.items()},
            release_reasons=dict(stats.batch_release_reasons),
        )


class SnapshotRing:
    """The last ``RING_SECONDS`` of snapshots of one model version, oldest first."""

    def __init__(self) -> None:
        self.snapshots: collections.deque[Snapshot] = collections.deque()

    def add(self, snapshot: Snapshot) -> None:
        if self.snapshots and snapshot.t - self.snapshots[-1].t < MIN_SNAPSHOT_SPACING_S:
            return
        self.snapshots.append(snapshot)
        while self.snapshots and snapshot.t - self.snapshots[0].t > RING_SECONDS:
            self.snapshots.popleft()

    def base_for(self, now: float, window_s: float) -> Snapshot | None:
        """The oldest snapshot no older than ``window_s`` (with half a tick of slack)."""
        for snapshot in self.snapshots:
            if now - snapshot.t <= window_s + MIN_SNAPSHOT_SPACING_S:
                return snapshot
        return None


def _diff_counts(new: Mapping[Any, int], old: Mapping[Any, int]) -> dict[str, int]:
    return {str(k): v - old.get(k, 0) for k, v in sorted(new.items()) if v - old.get(k, 0) > 0}


def quantile_us(counts: Sequence[int], q: float, bounds: Sequence[float]) -> float | None:
    """The ``q`` quantile of a bucketed distribution, interpolated inside its bucket (as
    Prometheus' ``histogram_quantile``); None when empty. +Inf answers the last finite bound."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(counts):
        if count and seen + count >= rank:
            if i >= len(bounds):
                return float(bounds[-1])
            lower = float(bounds[i - 1]) if i else 0.0
            return lower + (float(bounds[i]) - lower) * (rank - seen) / count
        seen += count
    return float(bounds[-1])


def window_summary(new: Snapshot, old: Snapshot) -> dict[str, Any]:
    """What happened between two snapshots of one version, as the live-stats JSON window."""
    duration_s = max(new.t - old.t, 0.0)
    requests = new.success - old.success
    failures = new.fail - old.fail

    def per_s(n: int) -> float:
        return n / duration_s if duration_s > 0 else 0.0

    histograms = {
        p: [a - b for a, b in zip(new.histograms[p], old.histograms[p], strict=True)]
        for p in new.histograms
    }
    latency: dict[str, dict[str, float | None]] = {}
    for phase in SUMMARY_PHASES:
        counts = histograms[phase]
        n = sum(counts)
        summary = {k: quantile_us(counts, q, LATENCY_BUCKET_BOUNDS_US) for k, q in QUANTILES}
        summary["mean"] = (new.sums_us[phase] - old.sums_us[phase]) / n if n else None
        latency[phase] = summary
    return {
        "duration_s": round(duration_s, 3),
        "requests": requests,
        "failures": failures,
        "requests_per_s": per_s(requests),
        "failures_per_s": per_s(failures),
        "inferences_per_s": per_s(new.inferences - old.inferences),
        "executions_per_s": per_s(new.executions - old.executions),
        "latency_us": latency,
        "histograms": histograms,
        "batch_sizes": _diff_counts(new.batch_executions, old.batch_executions),
        "release_reasons": _diff_counts(new.release_reasons, old.release_reasons),
        "failures_by_reason": _diff_counts(new.failures_by_reason, old.failures_by_reason),
    }


def totals(snapshot: Snapshot) -> dict[str, Any]:
    """The cumulative counters since load, for consumers that diff successive polls themselves."""
    return {
        "requests": snapshot.success,
        "failures": snapshot.fail,
        "inferences": snapshot.inferences,
        "executions": snapshot.executions,
        "histograms": {p: list(c) for p, c in snapshot.histograms.items()},
        "sums_us": snapshot.sums_us,
        "batch_sizes": {str(k): v for k, v in sorted(snapshot.batch_executions.items())},
        "failures_by_reason": dict(snapshot.failures_by_reason),
    }


class LiveStats:
    """Snapshot rings for every loaded version, keyed weakly by its ``ModelStatistics``: an
    unloaded version's ring goes away with it."""

    def __init__(self) -> None:
        self._rings: weakref.WeakKeyDictionary[ModelStatistics, SnapshotRing] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def sample(self, stats: ModelStatistics, *, now: float | None = None) -> Snapshot:
        """Take a snapshot of ``stats`` now, keep it in its ring, and return it."""
        snapshot = take_snapshot(stats, now=now)
        with self._lock:
            ring = self._rings.get(stats)
            if ring is None:
                ring = self._rings[stats] = SnapshotRing()
            ring.add(snapshot)
        return snapshot

    def windows(self, stats: ModelStatistics, current: Snapshot) -> dict[str, Any]:
        """``{"10": window, "60": window}`` ending at ``current``."""
        with self._lock:
            ring = self._rings.get(stats)
            bases = {w: ring.base_for(current.t, w) if ring else None for w in WINDOWS_S}
        return {str(w): window_summary(current, base or current) for w, base in bases.items()}

    def version_entry(self, version: Any, *, now: float | None = None) -> dict[str, Any]:
        stats: ModelStatistics = version.statistics
        current = self.sample(stats, now=now)
        scheduler = getattr(version, "scheduler", None)
        return {
            "model": stats.model_name,
            "version": stats.version,
            "state": _state_name(getattr(version, "state", "READY")),
            "in_flight": int(getattr(scheduler, "in_flight", 0) or 0),
            "queue_depth": int(getattr(scheduler, "queue_depth", 0) or 0),
            "last_inference_ms": stats.last_inference_ms,
            "totals": totals(current),
            "windows": self.windows(stats, current),
        }


def _state_name(state: Any) -> str:
    if isinstance(state, enum.Enum):
        return str(state.value if isinstance(state.value, str) else state.name)
    return str(state)


def loaded_versions(server: Any) -> Iterator[Any]:
    """Every loaded version of ``server`` that has statistics, whatever the model table's shape."""
    if hasattr(server, "loaded_versions"):
        candidates: Iterable[Any] = server.loaded_versions()
    else:
        table = getattr(server, "models", None) or getattr(server, "model_table", None) or {}
        candidates = (
            version
            for entry in table.values()
            for version in (getattr(entry, "versions", entry) or {}).values()
        )
    for version in candidates:
        if getattr(version, "statistics", None) is not None:
            yield version


LIVE_STATS = LiveStats()


def live_stats(server: Any, *, registry: LiveStats = LIVE_STATS) -> dict[str, Any]:
    """The replica's live stats as a dict (see ``docs/dashboards.md`` for the shape)."""
    now = time.monotonic()
    models = [registry.version_entry(v, now=now) for v in loaded_versions(server)]
    models.sort(key=lambda m: (m["model"], m["version"]))
    return {
        "replica": {
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": _STARTED_AT,
        },
        "time": time.time(),
        "windows_s": list(WINDOWS_S),
        "bucket_bounds_us": list(LATENCY_BUCKET_BOUNDS_US),
        "system": system_metrics.system_snapshot(),
        "models": models,
    }


def live_stats_json(server: Any) -> bytes:
    """``GET /v2/portico/live-stats``: the replica's live stats as JSON bytes."""
    return orjson.dumps(live_stats(server))


def sample_all(server: Any, *, registry: LiveStats = LIVE_STATS) -> None:
    """Take one snapshot of every loaded version (the background sampler's tick)."""
    now = time.monotonic()
    for version in loaded_versions(server):
        registry.sample(version.statistics, now=now)


async def sample_forever(server: Any, *, interval_s: float = SNAPSHOT_INTERVAL_S) -> None:
    """Keep the rings filled once a second so windows are exact even between polls."""
    while True:
        sample_all(server)
        await asyncio.sleep(interval_s)
