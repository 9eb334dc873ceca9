"""Per-model Prometheus metrics: Triton's names and labels (PROTOCOL.md §6) plus Portico's own.

A custom collector reads the ``ModelStatistics`` of every loaded version at scrape time, so series
appear when a version loads (zero-initialised) and vanish when it unloads, with nothing to
register or forget. Triton's counters keep Triton's exact sample names (no ``_total`` suffix) so
existing dashboards and alerts work unchanged. Portico adds latency histograms (fixed buckets
shared by every replica, in microseconds), a counter of why each batch was released and a counter
of executions per batch size, which together show why batches are the size they are.

Labels are bounded: ``model``, ``version``, one ``_<key>`` per ``metric_tags`` entry, and
``reason`` or ``batch_size`` where named; never request ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from serving.core.statistics import FAILURE_REASONS, LATENCY_BUCKET_BOUNDS_US, ModelStatistics

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Release reasons of the batching schedulers (serving.schedulers.dynamic.RELEASE_REASONS); kept
# here as data so a scrape never imports the schedulers.
RELEASE_REASONS = ("preferred_size", "max_batch", "queue_delay", "instance_idle", "incompatible")

_DURATIONS = (
    ("nv_inference_request_duration_us", "success", "Cumulative inference request duration"),
    ("nv_inference_queue_duration_us", "queue", "Cumulative inference queuing duration"),
    ("nv_inference_compute_input_duration_us", "compute_input",
     "Cumulative compute input duration"),
    ("nv_inference_compute_infer_duration_us", "compute_infer",
     "Cumulative compute inference duration"),
    ("nv_inference_compute_output_duration_us", "compute_output",
     "Cumulative inference compute output duration"),
)  # fmt: skip

_HISTOGRAMS = (
    ("portico_inference_request_duration_us", "request", "End-to-end request latency"),
    ("portico_inference_queue_duration_us", "queue", "Time waiting in the scheduler queue"),
    ("portico_inference_compute_input_duration_us", "compute_input",
     "Compute input (hand-off to the instance) latency"),
    ("portico_inference_compute_infer_duration_us", "compute_infer", "Model execution latency"),
    ("portico_inference_compute_output_duration_us", "compute_output",
     "Compute output (hand-back from the instance) latency"),
)  # fmt: skip


class LoadedVersionLike(Protocol):
    """What the collector reads of a loaded version (``serving.core.model_table.LoadedVersion``)."""

    state: str
    spec: Any
    statistics: ModelStatistics
    scheduler: Any


class ServerLike(Protocol):
    """What the collector reads of the server (``InferenceServer``)."""

    def loaded_versions(self) -> Sequence[Any]:
        """Versions that serve or are draining, in model then version order."""
        ...


def _labels(version: LoadedVersionLike) -> dict[str, str]:
    labels = {"model": version.statistics.model_name, "version": str(version.statistics.version)}
    for key, value in sorted(version.spec.config.metric_tags.items()):
        labels[f"_{key}"] = value
    return labels


def _pending(version: LoadedVersionLike) -> int:
    scheduler = version.scheduler
    if scheduler is not None:
        return int(scheduler.queue_depth)
    return version.statistics.pending_request_count


def _batches(version: LoadedVersionLike) -> bool:
    config = version.spec.config
    return config.WhichOneof("scheduling_choice") in ("dynamic_batching", "sequence_batching")


class ModelMetricsCollector(Collector):
    """Collects the per-model families from the server's loaded versions at each scrape."""

    def __init__(self, server: ServerLike) -> None:
        self.server = server

    def collect(self) -> Iterable[Metric]:
        loaded: Sequence[LoadedVersionLike] = self.server.loaded_versions()
        versions = [(v, _labels(v), v.statistics) for v in loaded]
        snapshots = [(v, labels, stats, _snapshot(stats)) for v, labels, stats in versions]
        yield from self._triton(snapshots)
        yield from self._portico(snapshots)

    def _triton(self, snapshots: list[Any]) -> Iterator[Metric]:
        success = Metric(
            "nv_inference_request_success",
            "Number of successful inference requests, all batch sizes",
            "counter",
        )
        failure = Metric(
            "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes",
            "counter",
        )
        count = Metric(
            "nv_inference_count",
            "Number of inferences performed (does not include cached requests)",
            "counter",
        )
        execs = Metric(
            "nv_inference_exec_count",
            "Number of model executions performed (does not include cached requests)",
            "counter",
        )
        pending = Metric(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
        )
        load = Metric("nv_model_load_duration_secs", "Model load time in seconds", "gauge")
        durations = [(Metric(name, doc, "counter"), field) for name, field, doc in _DURATIONS]
        for version, labels, _, snap in snapshots:
            success.add_sample(success.name, labels, float(snap["success_count"]))
            for reason in FAILURE_REASONS:
                value = float(snap["failures"].get(reason, 0))
                failure.add_sample(failure.name, {**labels, "reason": reason}, value)
            count.add_sample(count.name, labels, float(snap["inference_count"]))
            execs.add_sample(execs.name, labels, float(snap["execution_count"]))
            pending.add_sample(pending.name, labels, float(_pending(version)))
            load.add_sample(load.name, labels, float(snap["load_duration_s"]))
            for metric, field in durations:
                metric.add_sample(metric.name, labels, snap["durations_ns"][field] / 1000.0)
        yield from (success, failure, count, execs, pending)
        yield from (metric for metric, _ in durations)
        yield load

    def _portico(self, snapshots: list[Any]) -> Iterator[Metric]:
        for name, phase, doc in _HISTOGRAMS:
            family = HistogramMetricFamily(name, f"{doc} (microseconds)", labels=None)
            for _, labels, _, snap in snapshots:
                counts, total_us = snap["histograms"][phase]
                _add_histogram(family, labels, counts, total_us)
            yield family
        releases = Metric(
            "portico_batch_releases",
            "Batches released, by why the batcher released them",
            "counter",
        )
        sizes = Metric("portico_batch_executions", "Model executions by batch size", "counter")
        for version, labels, _, snap in snapshots:
            if _batches(version):
                for reason in RELEASE_REASONS:
                    value = float(snap["releases"].get(reason, 0))
                    releases.add_sample(
                        "portico_batch_releases_total", {**labels, "reason": reason}, value
                    )
            for size, executions in sorted(snap["batch_sizes"].items()):
                sizes.add_sample(
                    "portico_batch_executions_total",
                    {**labels, "batch_size": str(size)},
                    float(executions),
                )
        yield releases
        yield sizes


def _snapshot(stats: ModelStatistics) -> dict[str, Any]:
    """One consistent read of a version's counters (workers record from other threads)."""
    with stats.lock:
        return {
            "success_count": stats.success.count,
            "failures": dict(stats.failures_by_reason),
            "inference_count": stats.inference_count,
            "execution_count": stats.execution_count,
            "load_duration_s": stats.load_duration_s,
            "durations_ns": {
                "success": stats.success.ns,
                "queue": stats.queue.ns,
                "compute_input": stats.compute_input.ns,
                "compute_infer": stats.compute_infer.ns,
                "compute_output": stats.compute_output.ns,
            },
            "histograms": {
                phase: (list(h.counts), h.sum_us) for phase, h in stats.histograms.items()
            },
            "releases": dict(stats.batch_release_reasons),
            "batch_sizes": {
                size: durations.compute_infer.count for size, durations in stats.batch_stats.items()
            },
        }


def _add_histogram(
    family: HistogramMetricFamily, labels: dict[str, str], counts: list[int], total_us: float
) -> None:
    cumulative = 0
    bounds = [*(str(float(b)) for b in LATENCY_BUCKET_BOUNDS_US), "+Inf"]
    for bound, bucket_count in zip(bounds, counts, strict=True):
        cumulative += bucket_count
        family.add_sample(f"{family.name}_bucket", {**labels, "le": bound}, float(cumulative))
    family.add_sample(f"{family.name}_count", labels, float(cumulative))
    family.add_sample(f"{family.name}_sum", labels, float(total_us))


def register(registry: CollectorRegistry, server: ServerLike) -> ModelMetricsCollector:
    """Add the per-model collector to the metrics port's registry."""
    collector = ModelMetricsCollector(server)
    registry.register(collector)
    return collector


class AccessLike(Protocol):
    """What the access collector reads (``serving.access.guard.AccessGuard``)."""

    @property
    def rejected(self) -> Mapping[tuple[str, str], int]: ...


class AccessMetricsCollector(Collector):
    """``portico_inference_rejected_total{token, reason}``: requests the access layer refused.

    ``token`` is the token's shown prefix (never the key; empty when no valid token was sent, so a
    stranger's guesses add no series); ``reason`` is one of ``REJECTION_REASONS``.
    """

    def __init__(self, access: AccessLike) -> None:
        self.access = access

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "portico_inference_rejected",
            "Inference requests refused by the access layer, by token prefix and reason",
            labels=["token", "reason"],
        )
        for (prefix, reason), count in sorted(dict(self.access.rejected).items()):
            family.add_metric([prefix, reason], float(count))
        yield family


REJECTION_REASONS = ("unauthenticated", "expired", "forbidden", "quota_rate", "quota_concurrency")


def register_access(registry: CollectorRegistry, access: AccessLike) -> AccessMetricsCollector:
    """Add the access layer's rejection counter (registry mode with inference auth only)."""
    collector = AccessMetricsCollector(access)
    registry.register(collector)
    return collector


class BudgetLike(Protocol):
    """What the admission collector reads (``serving.core.request_bytes.RequestBytesBudget``)."""

    limit: int
    held: int
    refused: int


class AdmissionMetricsCollector(Collector):
    """The replica's request-bytes budget (``--max-in-flight-request-bytes``): what requests being
    served hold, the limit, and how many requests it refused. Only while there is a budget."""

    def __init__(self, budget: BudgetLike) -> None:
        self.budget = budget

    def collect(self) -> Iterable[Metric]:
        budget = self.budget
        if not budget.limit:
            return
        yield GaugeMetricFamily(
            "portico_request_bytes_in_flight",
            "Bytes of the inference requests being served (HTTP bodies, gRPC inputs)",
            value=float(budget.held),
        )
        yield GaugeMetricFamily(
            "portico_request_bytes_in_flight_limit",
            "The replica's budget of request bytes being served (--max-in-flight-request-bytes)",
            value=float(budget.limit),
        )
        yield CounterMetricFamily(
            "portico_request_bytes_refused",
            "Inference requests refused because their bytes would pass the budget",
            value=float(budget.refused),
        )


def register_admission(registry: CollectorRegistry, budget: BudgetLike) -> None:
    """Add the request-bytes budget's gauges and refusal counter."""
    registry.register(AdmissionMetricsCollector(budget))


class UnreadLike(Protocol):
    """What the stream collector reads (``serving.core.streaming.UnreadResponses``)."""

    limit: int
    ended: int


class UnreadResponsesCollector(Collector):
    """Streamed requests ended because their client did not read their responses
    (``--max-unread-response-bytes``, ``--unread-response-timeout-secs``). Only while there is
    a limit."""

    def __init__(self, unread: UnreadLike) -> None:
        self.unread = unread

    def collect(self) -> Iterable[Metric]:
        if not self.unread.limit:
            return
        yield CounterMetricFamily(
            "portico_stream_requests_ended_unread",
            "Streamed requests ended because their client did not read their responses "
            "(--max-unread-response-bytes, --unread-response-timeout-secs)",
            value=float(self.unread.ended),
        )


def register_unread_responses(registry: CollectorRegistry, unread: UnreadLike) -> None:
    """Add the counter of streamed requests ended for a lagging client."""
    registry.register(UnreadResponsesCollector(unread))


def render_metrics(server: ServerLike) -> bytes:
    """The per-model metrics alone in Prometheus text format (content type ``CONTENT_TYPE``)."""
    registry = CollectorRegistry(auto_describe=False)
    register(registry, server)
    return generate_text(registry)


def generate_text(registry: CollectorRegistry) -> bytes:
    """Prometheus text format (0.0.4) as Triton writes it.

    ``prometheus_client.generate_latest`` names every counter family ``<name>_total`` in its HELP
    and TYPE lines; Triton's counters have no such suffix (``# TYPE nv_inference_count counter``
    above ``nv_inference_count{...}``), and a family line that does not match its samples makes
    strict parsers read them as untyped. Here a family line uses the name its samples carry.
    """
    lines: list[str] = []
    for metric in registry.collect():
        samples = [s for s in metric.samples if not s.name.endswith(_OPENMETRICS_ONLY)]
        if not samples:
            continue  # e.g. no batching model loaded: no release-reason series at all
        name, kind = metric.name, _TEXT_TYPES.get(metric.type, "untyped")
        if kind == "counter" and all(s.name == f"{name}_total" for s in samples):
            name = f"{name}_total"
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        lines.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        lines.extend(_sample_line(sample) for sample in samples)
    return "".join(lines).encode()


_OPENMETRICS_ONLY = ("_created", "_gsum", "_gcount")
_TEXT_TYPES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram",
               "summary": "summary", "info": "gauge", "stateset": "gauge"}  # fmt: skip


def _sample_line(sample: Sample) -> str:
    labels = ",".join(f'{key}="{_escape(value)}"' for key, value in sorted(sample.labels.items()))
    selector = f"{{{labels}}}" if labels else ""
    return f"{sample.name}{selector} {_number(sample.value)}\n"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
