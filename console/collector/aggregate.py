"""Fleet aggregation of replicas' live stats: pure functions, no I/O.

Rates add across replicas. Percentiles come from histograms merged bucket by bucket (every replica
uses the same fixed bounds), never from averaged percentiles. Means are weighted by counts. A
replica whose poll failed, or that stopped heartbeating, contributes nothing: it is listed as down
and its numbers drop out of the sums on the very next frame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
# The latency phases the dashboards chart: end to end, waiting in the queue, the model itself.
CHART_PHASES = ("request", "queue", "compute_infer")
RATE_FIELDS = ("requests_per_s", "failures_per_s", "inferences_per_s", "executions_per_s")
COUNT_MAPS = ("batch_sizes", "release_reasons", "failures_by_reason")
DEFAULT_WINDOW = "10"


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaSample:
    """One replica's poll: its live-stats payload, or the reason there is none."""

    replica_id: str
    url: str
    payload: Mapping[str, Any] | None
    error: str = ""

    @property
    def up(self) -> bool:
        return self.payload is not None


def merge_histograms(histograms: Iterable[Sequence[int]]) -> list[int]:
    """Bucket-wise sum; shorter lists count as zeros in their missing buckets."""
    merged: list[int] = []
    for counts in histograms:
        if len(counts) > len(merged):
            merged.extend([0] * (len(counts) - len(merged)))
        for i, count in enumerate(counts):
            merged[i] += count
    return merged


def quantile(counts: Sequence[int], q: float, bounds: Sequence[float]) -> float | None:
    """The ``q`` quantile of a bucketed distribution (the last bucket is +Inf), linearly
    interpolated inside its bucket like Prometheus' ``histogram_quantile``; None when empty."""
    total = sum(counts)
    if total == 0 or not bounds:
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


def latency_summary(
    counts: Sequence[int], bounds: Sequence[float], *, mean_us: float | None = None
) -> dict[str, float | None]:
    summary = {name: quantile(counts, q, bounds) for name, q in QUANTILES}
    summary["mean"] = mean_us
    return summary


def _add_counts(into: dict[str, int], counts: Mapping[str, int]) -> None:
    for key, value in counts.items():
        into[key] = into.get(key, 0) + int(value)


def merge_entries(
    entries: Sequence[Mapping[str, Any]], *, window: str, bounds: Sequence[float]
) -> dict[str, Any]:
    """Combine live-stats version entries (one model's, from any replicas and versions) into one
    summary of ``window``: rates and gauges summed, percentiles from the merged histograms."""
    windows = [e["windows"][window] for e in entries if window in e.get("windows", {})]
    summary: dict[str, Any] = {
        field: sum(float(w.get(field, 0.0)) for w in windows) for field in RATE_FIELDS
    }
    summary["in_flight"] = sum(int(e.get("in_flight", 0)) for e in entries)
    summary["queue_depth"] = sum(int(e.get("queue_depth", 0)) for e in entries)
    for name in COUNT_MAPS:
        counts: dict[str, int] = {}
        for w in windows:
            _add_counts(counts, w.get(name, {}))
        summary[name] = dict(sorted(counts.items(), key=lambda kv: _sort_key(kv[0])))
    latency: dict[str, dict[str, float | None]] = {}
    histograms: dict[str, list[int]] = {}
    for phase in CHART_PHASES:
        merged = merge_histograms(
            w["histograms"][phase] for w in windows if phase in w.get("histograms", {})
        )
        histograms[phase] = merged
        latency[phase] = latency_summary(merged, bounds, mean_us=_weighted_mean(windows, phase))
    summary["latency_us"] = latency
    summary["histograms"] = histograms
    return summary


def _sort_key(key: str) -> tuple[int, int | str]:
    return (0, int(key)) if key.isdigit() else (1, key)


def _weighted_mean(windows: Sequence[Mapping[str, Any]], phase: str) -> float | None:
    total_us = 0.0
    total_n = 0
    for w in windows:
        n = sum(w.get("histograms", {}).get(phase, ()))
        mean = w.get("latency_us", {}).get(phase, {}).get("mean")
        if n and mean is not None:
            total_us += mean * n
            total_n += n
    return total_us / total_n if total_n else None


def reference_bounds(samples: Sequence[ReplicaSample]) -> list[float]:
    """The bucket bounds the fleet shares (the first live replica's)."""
    for sample in samples:
        if sample.payload is not None and sample.payload.get("bucket_bounds_us"):
            return list(sample.payload["bucket_bounds_us"])
    return []


def _comparable(sample: ReplicaSample, bounds: Sequence[float]) -> bool:
    # A replica on other bucket bounds (a mixed-version fleet) cannot be merged bucket by bucket.
    return sample.payload is not None and list(sample.payload.get("bucket_bounds_us", [])) == list(
        bounds
    )


def aggregate_fleet(
    samples: Sequence[ReplicaSample], *, window: str = DEFAULT_WINDOW
) -> dict[str, Any]:
    """One dashboard frame: every replica's status and every model combined, per replica and per
    version."""
    bounds = reference_bounds(samples)
    live = [s for s in samples if _comparable(s, bounds)]
    by_model: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for sample in live:
        assert sample.payload is not None
        for entry in sample.payload.get("models", []):
            by_model.setdefault(str(entry["model"]), []).append((sample.replica_id, entry))
    models = {
        name: _model_frame(pairs, window=window, bounds=bounds)
        for name, pairs in sorted(by_model.items())
    }
    return {
        "window_s": float(window),
        "bucket_bounds_us": bounds,
        "replicas": [_replica_frame(s, comparable=s in live) for s in samples],
        "models": models,
    }


def _model_frame(
    pairs: Sequence[tuple[str, Mapping[str, Any]]], *, window: str, bounds: Sequence[float]
) -> dict[str, Any]:
    replicas: dict[str, list[Mapping[str, Any]]] = {}
    versions: dict[str, list[Mapping[str, Any]]] = {}
    for replica_id, entry in pairs:
        replicas.setdefault(replica_id, []).append(entry)
        versions.setdefault(str(entry["version"]), []).append(entry)
    return {
        "replicas_up": len(replicas),
        "versions": {
            v: sorted({str(e.get("state", "")) for e in es})
            for v, es in sorted(versions.items(), key=lambda kv: int(kv[0]))
        },
        "combined": merge_entries([e for _, e in pairs], window=window, bounds=bounds),
        "by_replica": {
            r: merge_entries(es, window=window, bounds=bounds) for r, es in sorted(replicas.items())
        },
        "by_version": {
            v: merge_entries(es, window=window, bounds=bounds) for v, es in versions.items()
        },
    }


def _replica_frame(sample: ReplicaSample, *, comparable: bool) -> dict[str, Any]:
    payload = sample.payload or {}
    error = sample.error or ("" if comparable or not sample.up else "histogram bounds differ")
    return {
        "id": sample.replica_id,
        "url": sample.url,
        "up": sample.up,
        "error": error,
        "hostname": payload.get("replica", {}).get("hostname", ""),
        "models": len(payload.get("models", [])),
        "system": payload.get("system", {}),
    }


def strip_histograms(frame: Mapping[str, Any]) -> dict[str, Any]:
    """The frame without raw histograms (what browsers get: they need the summaries only)."""
    models = {}
    for name, model in frame.get("models", {}).items():
        model = dict(model)
        for key in ("combined",):
            model[key] = _without_histograms(model[key])
        for key in ("by_replica", "by_version"):
            model[key] = {k: _without_histograms(v) for k, v in model[key].items()}
        models[name] = model
    return {**frame, "models": models, "bucket_bounds_us": []}


def _without_histograms(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "histograms"}
