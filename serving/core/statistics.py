"""Per model-version statistics: Triton's statistics extension plus cumulative latency histograms.

Schedulers record into a ``ModelStatistics``; the statistics endpoint, Prometheus metrics and the
live stats read it. Everything is cumulative (counts and nanoseconds since load), so a reader that
wants a window diffs two snapshots. Histogram buckets are fixed and shared by every replica, which
is what lets the console merge histograms across replicas instead of averaging percentiles.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import time
from collections import Counter

# Upper bounds in microseconds, roughly x1.5 per step from 25 µs to 60 s; the last bucket is +Inf.
LATENCY_BUCKET_BOUNDS_US: tuple[float, ...] = tuple(round(25 * 1.5**i) for i in range(37))
# The same bounds in whole nanoseconds: a duration's bucket is found without dividing it first.
_BUCKET_BOUNDS_NS: tuple[int, ...] = tuple(int(bound) * 1000 for bound in LATENCY_BUCKET_BOUNDS_US)

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
PHASES = ("request", "queue", "compute_input", "compute_infer", "compute_output")


@dataclasses.dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclasses.dataclass(slots=True)
class BatchDurations:
    compute_input: Duration = dataclasses.field(default_factory=Duration)
    compute_infer: Duration = dataclasses.field(default_factory=Duration)
    compute_output: Duration = dataclasses.field(default_factory=Duration)


class LatencyHistogram:
    """Cumulative counts per fixed bucket (``LATENCY_BUCKET_BOUNDS_US`` plus +Inf)."""

    __slots__ = ("counts", "sum_us")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKET_BOUNDS_US) + 1)
        self.sum_us = 0.0

    def observe_ns(self, ns: int) -> None:
        self.counts[bisect.bisect_left(_BUCKET_BOUNDS_NS, ns)] += 1
        self.sum_us += ns / 1000.0


class ModelStatistics:
    """Counters for one loaded model version. Thread-safe: instances record from worker threads."""

    def __init__(self, model_name: str, version: int) -> None:
        self.model_name = model_name
        self.version = version
        self._lock = threading.Lock()
        self.last_inference_ms = 0
        self.inference_count = 0
        self.execution_count = 0
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.failures_by_reason: Counter[str] = Counter({reason: 0 for reason in FAILURE_REASONS})
        self.batch_stats: dict[int, BatchDurations] = {}
        self.batch_release_reasons: Counter[str] = Counter()
        self.histograms = {phase: LatencyHistogram() for phase in PHASES}
        # NOTE: the same histograms in PHASES order, for the per-request path.
        self._phase_histograms = tuple(self.histograms[phase] for phase in PHASES)
        self.load_duration_s = 0.0
        # Requests accepted by the scheduler and not yet handed to an instance; the scheduler keeps
        # it current (Triton's nv_inference_pending_request_count).
        self.pending_request_count = 0

    @property
    def lock(self) -> threading.Lock:
        """Hold it to read several counters as one consistent snapshot (metrics, live stats)."""
        return self._lock

    def record_success(
        self,
        *,
        total_ns: int,
        queue_ns: int,
        compute_input_ns: int,
        compute_infer_ns: int,
        compute_output_ns: int,
    ) -> None:
        """One request answered successfully (a batch-8 request is one request)."""
        with self._lock:
            self.last_inference_ms = int(time.time() * 1000)
            self.success.add(total_ns)
            self.queue.add(queue_ns)
            self.compute_input.add(compute_input_ns)
            self.compute_infer.add(compute_infer_ns)
            self.compute_output.add(compute_output_ns)
            request, queue, compute_input, compute_infer, compute_output = self._phase_histograms
            request.observe_ns(total_ns)
            queue.observe_ns(queue_ns)
            compute_input.observe_ns(compute_input_ns)
            compute_infer.observe_ns(compute_infer_ns)
            compute_output.observe_ns(compute_output_ns)

    def record_failure(self, *, reason: str, total_ns: int) -> None:
        """One request failed after the model was resolved. ``reason`` is one of FAILURE_REASONS."""
        with self._lock:
            self.last_inference_ms = int(time.time() * 1000)
            self.fail.add(total_ns)
            self.failures_by_reason[reason] += 1

    def record_execution(
        self,
        *,
        batch_size: int,
        compute_input_ns: int,
        compute_infer_ns: int,
        compute_output_ns: int,
        release_reason: str = "",
        inference_count: int | None = None,
    ) -> None:
        """One model execution of ``batch_size`` inferences (a dynamic batch counts once).

        ``inference_count`` is how many of them succeeded when not all did (Triton's
        ``inference_count`` counts successful inferences only); None means all of them.
        """
        with self._lock:
            self.execution_count += 1
            self.inference_count += batch_size if inference_count is None else inference_count
            stats = self.batch_stats.setdefault(batch_size, BatchDurations())
            stats.compute_input.add(compute_input_ns)
            stats.compute_infer.add(compute_infer_ns)
            stats.compute_output.add(compute_output_ns)
            if release_reason:
                self.batch_release_reasons[release_reason] += 1

    def triton_dict(self) -> dict[str, object]:
        """This version's entry of ``model_stats`` in the statistics extension's JSON."""
        with self._lock:
            return {
                "name": self.model_name,
                "version": str(self.version),
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {
                    "success": self.success.as_dict(),
                    "fail": self.fail.as_dict(),
                    "queue": self.queue.as_dict(),
                    "compute_input": self.compute_input.as_dict(),
                    "compute_infer": self.compute_infer.as_dict(),
                    "compute_output": self.compute_output.as_dict(),
                    "cache_hit": {"count": 0, "ns": 0},
                    "cache_miss": {"count": 0, "ns": 0},
                },
                "response_stats": {},
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": stats.compute_input.as_dict(),
                        "compute_infer": stats.compute_infer.as_dict(),
                        "compute_output": stats.compute_output.as_dict(),
                    }
                    for size, stats in sorted(self.batch_stats.items())
                ],
                "memory_usage": [],
            }
