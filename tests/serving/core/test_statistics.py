"""Latency histograms: a duration lands in the first bucket whose upper bound (in µs) is at or
above it, as Prometheus's ``le`` buckets read, whatever unit the scheduler measured it in."""

from __future__ import annotations

import pytest

from serving.core.statistics import LATENCY_BUCKET_BOUNDS_US, PHASES, ModelStatistics


@pytest.mark.parametrize(
    ("ns", "bucket"),
    [
        (0, 0),
        (25_000, 0),  # exactly on the first bound: still inside it
        (25_001, 1),
        (37_999, 1),
        (38_000, 1),
        (38_001, 2),
        (int(LATENCY_BUCKET_BOUNDS_US[-1] * 1000), len(LATENCY_BUCKET_BOUNDS_US) - 1),
        (int(LATENCY_BUCKET_BOUNDS_US[-1] * 1000) + 1, len(LATENCY_BUCKET_BOUNDS_US)),  # +Inf
    ],
)
def test_a_duration_falls_in_the_first_bucket_at_or_above_it(ns: int, bucket: int) -> None:
    stats = ModelStatistics("m", 1)
    stats.record_success(total_ns=ns, queue_ns=0, compute_input_ns=0, compute_infer_ns=0,
                         compute_output_ns=0)  # fmt: skip
    counts = stats.histograms["request"].counts
    assert counts[bucket] == 1
    assert sum(counts) == 1
    assert stats.histograms["request"].sum_us == pytest.approx(ns / 1000)


def test_each_phase_goes_to_its_own_histogram() -> None:
    stats = ModelStatistics("m", 1)
    durations = dict(zip(PHASES, (10_000_000, 30_000, 50_000, 9_000_000, 1_000), strict=True))
    stats.record_success(total_ns=durations["request"], queue_ns=durations["queue"],
                         compute_input_ns=durations["compute_input"],
                         compute_infer_ns=durations["compute_infer"],
                         compute_output_ns=durations["compute_output"])  # fmt: skip
    for phase, ns in durations.items():
        assert stats.histograms[phase].sum_us == pytest.approx(ns / 1000), phase
    assert stats.success.count == 1 and stats.success.ns == durations["request"]
    assert stats.queue.ns == durations["queue"]
