"""Per model-version statistics: a duration lands in the first latency bucket whose upper bound
(in µs) is at or above it, as Prometheus's ``le`` buckets read, and the totals read are those of
every request and execution recorded, however they were added up."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from serving.core.statistics import FOLD_AT, LATENCY_BUCKET_BOUNDS_US, PHASES, ModelStatistics


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


def _bucket(ns: int) -> int:
    """The bucket a duration belongs in, read off the bounds one at a time."""
    for index, bound_us in enumerate(LATENCY_BUCKET_BOUNDS_US):
        if ns <= bound_us * 1000:
            return index
    return len(LATENCY_BUCKET_BOUNDS_US)


def test_successes_added_in_blocks_give_the_totals_of_adding_them_one_by_one() -> None:
    # More than one block and a partial one, with durations on and around the bounds.
    rng = np.random.default_rng(7)
    bounds_ns = [int(b * 1000) for b in LATENCY_BUCKET_BOUNDS_US]
    durations = [*bounds_ns, *(b + 1 for b in bounds_ns), 0]
    durations += rng.integers(0, 70_000_000_000, FOLD_AT * 2 + 13 - len(durations)).tolist()
    stats = ModelStatistics("m", 1)
    expected = {phase: [0] * (len(LATENCY_BUCKET_BOUNDS_US) + 1) for phase in PHASES}
    for index in range(len(durations)):
        # Each phase gets a different duration of the list, so that columns cannot be mixed up.
        row = [durations[(index + shift) % len(durations)] for shift in range(len(PHASES))]
        stats.record_success(total_ns=row[0], queue_ns=row[1], compute_input_ns=row[2],
                             compute_infer_ns=row[3], compute_output_ns=row[4])  # fmt: skip
        for phase, value in zip(PHASES, row, strict=True):
            expected[phase][_bucket(value)] += 1
    for phase in PHASES:
        assert stats.histograms[phase].counts == expected[phase], phase
        assert stats.histograms[phase].sum_us == pytest.approx(sum(durations) / 1000)
    assert stats.success.count == len(durations) and stats.success.ns == sum(durations)
    assert stats.compute_output.count == len(durations)


def test_executions_are_counted_per_batch_size_with_their_release_reasons() -> None:
    stats = ModelStatistics("m", 1)
    for index in range(FOLD_AT + 5):
        size = 1 + index % 3
        stats.record_execution(
            batch_size=size, compute_input_ns=1, compute_infer_ns=10 * size, compute_output_ns=2,
            release_reason="max_batch_size" if size == 3 else "",
            inference_count=size - 1 if index == 0 else None,  # one request of one batch failed
        )  # fmt: skip
    runs = {size: len([i for i in range(FOLD_AT + 5) if 1 + i % 3 == size]) for size in (1, 2, 3)}
    assert stats.execution_count == FOLD_AT + 5
    assert stats.inference_count == sum(size * n for size, n in runs.items()) - 1
    assert sorted(stats.batch_stats) == [1, 2, 3]
    for size, n in runs.items():
        durations = stats.batch_stats[size]
        assert durations.compute_infer.count == n and durations.compute_infer.ns == 10 * size * n
        assert durations.compute_input.ns == n and durations.compute_output.ns == 2 * n
    assert stats.batch_release_reasons == {"max_batch_size": runs[3]}
    assert stats.triton_dict()["execution_count"] == FOLD_AT + 5


def test_a_reader_holding_the_lock_sees_what_was_recorded_before_it() -> None:
    stats = ModelStatistics("m", 1)
    stats.record_success(total_ns=5, queue_ns=1, compute_input_ns=1, compute_infer_ns=2,
                         compute_output_ns=1)  # fmt: skip
    stats.record_execution(batch_size=1, compute_input_ns=1, compute_infer_ns=2,
                           compute_output_ns=1)  # fmt: skip
    with stats.lock:  # the metrics' and the live stats' way of reading: it must not deadlock
        assert stats.success.count == 1 and stats.execution_count == 1
        assert sum(stats.histograms["request"].counts) == 1
    assert stats.last_inference_ms > 0


def test_records_from_many_threads_are_all_counted() -> None:
    stats = ModelStatistics("m", 1)
    per_thread = FOLD_AT * 3 + 1

    def record() -> None:
        for _ in range(per_thread):
            stats.record_success(total_ns=1000, queue_ns=0, compute_input_ns=0,
                                 compute_infer_ns=0, compute_output_ns=0)  # fmt: skip
            stats.record_execution(batch_size=1, compute_input_ns=0, compute_infer_ns=1,
                                   compute_output_ns=0)  # fmt: skip
            if threading.get_ident() % 2:
                stats.success  # noqa: B018 - a reader folding while the others record

    threads = [threading.Thread(target=record) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stats.success.count == 4 * per_thread and stats.success.ns == 4 * per_thread * 1000
    assert stats.execution_count == 4 * per_thread == stats.batch_stats[1].compute_infer.ns
