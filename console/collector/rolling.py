"""A small rolling store of per-second, per-version deltas for the compare view: pure, no I/O.

Each replica reports cumulative totals since its version was loaded. ``TotalsTracker`` diffs
successive polls of the same replica into exact deltas (no window overlap, no gaps), ignoring the
first sight of a replica and any counter that went backwards (a restart or a reload). The store
keeps the merged delta of every (model, version) per tick, so any time range can be summarised with
percentiles from merged histograms, just like the live frames.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from console.collector.aggregate import QUANTILES, merge_histograms, quantile

COMPARE_PHASES = ("request", "queue", "compute_infer")
KEEP_S = 60 * 60


@dataclasses.dataclass(slots=True)
class Delta:
    """What one (model, version) did during one tick, summed over replicas."""

    requests: int = 0
    failures: int = 0
    inferences: int = 0
    histograms: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    sums_us: dict[str, float] = dataclasses.field(default_factory=dict)

    def add(self, other: Delta) -> None:
        self.requests += other.requests
        self.failures += other.failures
        self.inferences += other.inferences
        for phase, counts in other.histograms.items():
            self.histograms[phase] = merge_histograms([self.histograms.get(phase, []), counts])
            self.sums_us[phase] = self.sums_us.get(phase, 0.0) + other.sums_us.get(phase, 0.0)


def totals_delta(new: Mapping[str, Any], old: Mapping[str, Any]) -> Delta | None:
    """``new - old`` of two cumulative totals, or None if any counter went backwards."""
    delta = Delta(
        requests=int(new["requests"]) - int(old["requests"]),
        failures=int(new["failures"]) - int(old["failures"]),
        inferences=int(new.get("inferences", 0)) - int(old.get("inferences", 0)),
    )
    if min(delta.requests, delta.failures, delta.inferences) < 0:
        return None
    for phase in COMPARE_PHASES:
        a, b = new["histograms"].get(phase, []), old["histograms"].get(phase, [])
        if len(a) != len(b):
            return None
        counts = [x - y for x, y in zip(a, b, strict=True)]
        if any(c < 0 for c in counts):
            return None
        delta.histograms[phase] = counts
        delta.sums_us[phase] = float(new["sums_us"].get(phase, 0.0)) - float(
            old["sums_us"].get(phase, 0.0)
        )
    return delta


class TotalsTracker:
    """Remembers each replica's last totals per version and turns the next poll into deltas."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str, int], Mapping[str, Any]] = {}

    def deltas(self, replica_key: str, payload: Mapping[str, Any]) -> dict[tuple[str, int], Delta]:
        out: dict[tuple[str, int], Delta] = {}
        for entry in payload.get("models", []):
            key = (replica_key, str(entry["model"]), int(entry["version"]))
            new = entry.get("totals")
            if new is None:
                continue
            old = self._last.get(key)
            self._last[key] = new
            delta = totals_delta(new, old) if old is not None else None
            if delta is not None:
                out[(key[1], key[2])] = delta
        return out

    def forget_except(self, replica_keys: set[str]) -> None:
        """Drop replicas no longer polled so a returning one starts fresh."""
        self._last = {k: v for k, v in self._last.items() if k[0] in replica_keys}


@dataclasses.dataclass(frozen=True, slots=True)
class Selection:
    """One side of a comparison: a model's version (None: all versions) over [start, end]."""

    model: str
    version: int | None
    start: float
    end: float


class RollingStore:
    """Per-tick deltas per (model, version) for the last ``keep_s`` seconds."""

    def __init__(self, *, keep_s: float = KEEP_S, slot_s: float = 1.0) -> None:
        self.keep_s = keep_s
        # Deltas are summed into slots of ``slot_s`` seconds: 5 s slots keep an hour of a busy
        # version in about a megabyte; idle versions store nothing.
        self.slot_s = slot_s
        self._points: dict[tuple[str, int], collections.deque[tuple[float, Delta]]] = {}

    def add_tick(self, t: float, deltas: Mapping[tuple[str, int], Delta]) -> None:
        t = (t // self.slot_s) * self.slot_s
        for key, delta in deltas.items():
            if not (delta.requests or delta.failures):
                continue
            points = self._points.setdefault(key, collections.deque())
            if points and points[-1][0] == t:
                points[-1][1].add(delta)
            else:
                points.append((t, delta))
        for key in list(self._points):
            points = self._points[key]
            while points and t - points[0][0] > self.keep_s:
                points.popleft()
            if not points:
                del self._points[key]

    def versions(self, model: str) -> list[int]:
        return sorted(v for m, v in self._points if m == model)

    def span(self, model: str) -> tuple[float, float] | None:
        times = [
            p[0] for (m, _), pts in self._points.items() if m == model for p in (pts[0], pts[-1])
        ]
        return (min(times), max(times)) if times else None

    def summarize(self, selection: Selection, *, bounds: Sequence[float]) -> dict[str, Any]:
        """p50/p95/p99 and mean per phase from the merged histograms, and throughput over the
        selection's time range."""
        total = Delta()
        first: float | None = None
        last: float | None = None
        for (model, version), points in self._points.items():
            if model != selection.model or selection.version not in (None, version):
                continue
            for t, delta in points:
                if t + self.slot_s > selection.start and t <= selection.end:
                    total.add(delta)
                    first = t if first is None else min(first, t)
                    last = t if last is None else max(last, t)
        # Each point covers the tick before it; a range only partly covered by data is measured
        # over the part that has data, so a short history does not read as low throughput.
        duration_s = (last - first + self.slot_s) if first is not None and last is not None else 0.0
        latency = {}
        for phase in COMPARE_PHASES:
            counts = total.histograms.get(phase, [])
            n = sum(counts)
            latency[phase] = {name: quantile(counts, q, bounds) for name, q in QUANTILES}
            latency[phase]["mean"] = total.sums_us.get(phase, 0.0) / n if n else None
        return {
            "model": selection.model,
            "version": selection.version,
            "start": selection.start,
            "end": selection.end,
            "data_from": first,
            "data_to": last,
            "requests": total.requests,
            "failures": total.failures,
            "requests_per_s": total.requests / duration_s if duration_s else 0.0,
            "inferences_per_s": total.inferences / duration_s if duration_s else 0.0,
            "latency_us": latency,
        }
