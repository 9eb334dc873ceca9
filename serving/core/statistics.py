"""Per model-version statistics: Triton's statistics extension plus cumulative latency histograms.

Schedulers record into a ``ModelStatistics``; the statistics endpoint, Prometheus metrics and the
live stats read it. Everything is cumulative (counts and nanoseconds since load), so a reader that
wants a window diffs two snapshots. Histogram buckets are fixed and shared by every replica, which
is what lets the console merge histograms across replicas instead of averaging percentiles.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter

import numpy as np

# Upper bounds in microseconds, roughly x1.5 per step from 25 µs to 60 s; the last bucket is +Inf.
LATENCY_BUCKET_BOUNDS_US: tuple[float, ...] = tuple(round(25 * 1.5**i) for i in range(37))
# The same bounds in whole nanoseconds: a duration's bucket is found without dividing it first.
_BUCKET_BOUNDS_NS: tuple[int, ...] = tuple(int(bound) * 1000 for bound in LATENCY_BUCKET_BOUNDS_US)
_BUCKET_BOUNDS_NS_ARRAY = np.array(_BUCKET_BOUNDS_NS, dtype=np.int64)
# Successes and executions recorded before they are added into the totals (see ModelStatistics).
FOLD_AT = 512

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

    def add_block(self, buckets: np.ndarray, total_ns: int) -> None:
        """Count a block of durations at once; ``buckets`` holds each one's bucket index."""
        added = np.bincount(buckets, minlength=len(self.counts)).tolist()
        self.counts = [have + more for have, more in zip(self.counts, added, strict=True)]
        self.sum_us += total_ns / 1000.0


class ModelStatistics:
    """Counters for one loaded model version. Thread-safe: the metrics and live stats read them
    from other threads than the loop that records.

    Successes and executions are recorded on every request's path, so they are only appended
    there; they are added into the totals (``success``, ``histograms``, ``batch_stats`` ...) when
    one of those is read, or once ``FOLD_AT`` wait, a block at a time with numpy. Failures are
    rare and counted at once.
    """

    def __init__(self, model_name: str, version: int) -> None:
        self.model_name = model_name
        self.version = version
        # NOTE: re-entrant: a reader holds ``lock`` across several reads, and each read folds.
        self._lock = threading.RLock()
        self._last_inference_s = 0.0
        self._inference_count = 0
        self._execution_count = 0
        # The durations in PHASES order: a success's columns, in the order they are recorded.
        self._phase_durations = tuple(Duration() for _ in PHASES)
        self.fail = Duration()
        self.failures_by_reason: Counter[str] = Counter({reason: 0 for reason in FAILURE_REASONS})
        self._batch_stats: dict[int, BatchDurations] = {}
        self._batch_release_reasons: Counter[str] = Counter()
        self._histograms = {phase: LatencyHistogram() for phase in PHASES}
        self._phase_histograms = tuple(self._histograms[phase] for phase in PHASES)
        self._successes: list[tuple[int, int, int, int, int]] = []
        self._executions: list[tuple[int, int, int, int, str, int]] = []
        self.load_duration_s = 0.0
        # Requests accepted by the scheduler and not yet handed to an instance; the scheduler keeps
        # it current (Triton's nv_inference_pending_request_count).
        self.pending_request_count = 0

    @property
    def lock(self) -> threading.RLock:
        """Hold it to read several counters as one consistent snapshot (metrics, live stats)."""
        return self._lock

    # -- recording (the request path) ----------------------------------------------------------

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
            self._last_inference_s = time.time()
            successes = self._successes
            successes.append(
                (total_ns, queue_ns, compute_input_ns, compute_infer_ns, compute_output_ns)
            )
            if len(successes) >= FOLD_AT:
                self._fold_successes()

    def record_failure(self, *, reason: str, total_ns: int) -> None:
        """One request failed after the model was resolved. ``reason`` is one of FAILURE_REASONS."""
        with self._lock:
            self._last_inference_s = time.time()
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
        succeeded = batch_size if inference_count is None else inference_count
        with self._lock:
            executions = self._executions
            executions.append((
                batch_size, compute_input_ns, compute_infer_ns, compute_output_ns,
                release_reason, succeeded,
            ))  # fmt: skip
            if len(executions) >= FOLD_AT:
                self._fold_executions()

    # -- the totals (each read adds in what was recorded since) --------------------------------

    @property
    def last_inference_ms(self) -> int:
        return int(self._last_inference_s * 1000)

    @property
    def success(self) -> Duration:
        return self._phase_duration(0)

    @property
    def queue(self) -> Duration:
        return self._phase_duration(1)

    @property
    def compute_input(self) -> Duration:
        return self._phase_duration(2)

    @property
    def compute_infer(self) -> Duration:
        return self._phase_duration(3)

    @property
    def compute_output(self) -> Duration:
        return self._phase_duration(4)

    @property
    def histograms(self) -> dict[str, LatencyHistogram]:
        with self._lock:
            self._fold_successes()
            return self._histograms

    @property
    def inference_count(self) -> int:
        with self._lock:
            self._fold_executions()
            return self._inference_count

    @property
    def execution_count(self) -> int:
        with self._lock:
            self._fold_executions()
            return self._execution_count

    @property
    def batch_stats(self) -> dict[int, BatchDurations]:
        with self._lock:
            self._fold_executions()
            return self._batch_stats

    @property
    def batch_release_reasons(self) -> Counter[str]:
        with self._lock:
            self._fold_executions()
            return self._batch_release_reasons

    def _phase_duration(self, column: int) -> Duration:
        with self._lock:
            self._fold_successes()
            return self._phase_durations[column]

    def _fold_successes(self) -> None:
        """Add the recorded successes into the durations and histograms (lock held)."""
        rows = self._successes
        if not rows:
            return
        self._successes = []
        block = np.array(rows, dtype=np.int64)
        sums = block.sum(axis=0).tolist()
        # NOTE: side="left" puts a duration on a bound in that bound's bucket, as bisect_left.
        buckets = np.searchsorted(_BUCKET_BOUNDS_NS_ARRAY, block, side="left")
        for column, (duration, histogram) in enumerate(
            zip(self._phase_durations, self._phase_histograms, strict=True)
        ):
            duration.add(sums[column], len(rows))
            histogram.add_block(buckets[:, column], sums[column])

    def _fold_executions(self) -> None:
        """Add the recorded executions into the counts and per-batch-size durations (lock held)."""
        rows = self._executions
        if not rows:
            return
        self._executions = []
        sizes, inputs, infers, outputs, reasons, succeeded = zip(*rows, strict=True)
        self._execution_count += len(rows)
        self._inference_count += sum(succeeded)
        self._batch_release_reasons.update(reason for reason in reasons if reason)
        block = np.array([sizes, inputs, infers, outputs], dtype=np.int64)
        for size in set(sizes):
            of_size = block[1:, block[0] == size]
            count = of_size.shape[1]
            input_ns, infer_ns, output_ns = of_size.sum(axis=1).tolist()
            stats = self._batch_stats.get(size)
            if stats is None:
                stats = self._batch_stats[size] = BatchDurations()
            stats.compute_input.add(input_ns, count)
            stats.compute_infer.add(infer_ns, count)
            stats.compute_output.add(output_ns, count)

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
