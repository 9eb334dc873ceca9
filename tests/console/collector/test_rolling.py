"""The compare view's rolling store: exact per-tick deltas from cumulative totals, summarised over
any range or version with percentiles from merged histograms."""

from __future__ import annotations

import pytest

from console.collector.rolling import Delta, RollingStore, Selection, TotalsTracker, totals_delta

pytestmark = pytest.mark.embedded

BOUNDS = [1000.0, 10_000.0, 100_000.0]


def _totals(requests: int, hist: list[int], *, failures: int = 0) -> dict:
    return {
        "requests": requests,
        "failures": failures,
        "inferences": requests,
        "histograms": {"request": hist, "queue": [requests, 0, 0, 0], "compute_infer": hist},
        "sums_us": {"request": float(requests * 500), "queue": 0.0, "compute_infer": 0.0},
    }


def _payload(version: int, totals: dict, model: str = "m") -> dict:
    return {"models": [{"model": model, "version": version, "totals": totals}]}


def test_tracker_diffs_successive_polls_and_skips_first_sight_and_restarts() -> None:
    tracker = TotalsTracker()
    assert tracker.deltas("r1", _payload(1, _totals(10, [10, 0, 0, 0]))) == {}
    delta = tracker.deltas("r1", _payload(1, _totals(25, [12, 13, 0, 0])))[("m", 1)]
    assert delta.requests == 15
    assert delta.histograms["request"] == [2, 13, 0, 0]
    # the replica restarted: its counters went backwards, so this poll is only a new baseline
    assert tracker.deltas("r1", _payload(1, _totals(3, [3, 0, 0, 0]))) == {}
    assert tracker.deltas("r1", _payload(1, _totals(5, [5, 0, 0, 0])))[("m", 1)].requests == 2


def test_forgotten_replica_starts_fresh_when_it_returns() -> None:
    tracker = TotalsTracker()
    tracker.deltas("r1", _payload(1, _totals(10, [10, 0, 0, 0])))
    tracker.forget_except(set())
    assert tracker.deltas("r1", _payload(1, _totals(20, [20, 0, 0, 0]))) == {}


def test_totals_delta_refuses_shrinking_histograms() -> None:
    assert totals_delta(_totals(5, [4, 1, 0, 0]), _totals(5, [5, 0, 0, 0])) is None


def _delta(requests: int, hist: list[int]) -> Delta:
    return Delta(
        requests=requests,
        inferences=requests,
        histograms={"request": hist, "queue": [requests, 0, 0, 0], "compute_infer": hist},
        sums_us={"request": 0.0, "queue": 0.0, "compute_infer": 0.0},
    )


def test_two_time_ranges_and_two_versions_are_summarised_side_by_side() -> None:
    store = RollingStore()
    for t in range(1, 61):
        fast, slow = (_delta(10, [10, 0, 0, 0]), _delta(5, [0, 0, 5, 0]))
        store.add_tick(float(t), {("m", 1): fast} if t <= 30 else {("m", 1): fast, ("m", 2): slow})
    early = store.summarize(Selection("m", None, 1.0, 30.0), bounds=BOUNDS)
    late = store.summarize(Selection("m", None, 31.0, 60.0), bounds=BOUNDS)
    assert early["requests_per_s"] == pytest.approx(10.0)
    assert late["requests_per_s"] == pytest.approx(15.0)
    assert early["latency_us"]["request"]["p95"] < 1000
    assert late["latency_us"]["request"]["p95"] > 10_000  # a third of the late traffic is slow
    v1 = store.summarize(Selection("m", 1, 0.0, 60.0), bounds=BOUNDS)
    v2 = store.summarize(Selection("m", 2, 0.0, 60.0), bounds=BOUNDS)
    assert v1["requests"] == 600 and v2["requests"] == 150
    assert v2["requests_per_s"] == pytest.approx(5.0)  # measured over the range it has data for
    assert v2["latency_us"]["request"]["p50"] > 10_000
    assert store.versions("m") == [1, 2]
    assert store.span("m") == (1.0, 60.0)


def test_same_tick_from_two_replicas_is_merged_and_old_ticks_expire() -> None:
    store = RollingStore(keep_s=10)
    store.add_tick(1.0, {("m", 1): _delta(4, [4, 0, 0, 0])})
    store.add_tick(1.0, {("m", 1): _delta(6, [0, 6, 0, 0])})
    assert store.summarize(Selection("m", 1, 0.0, 2.0), bounds=BOUNDS)["requests"] == 10
    store.add_tick(20.0, {("m", 1): _delta(1, [1, 0, 0, 0])})
    assert store.summarize(Selection("m", 1, 0.0, 30.0), bounds=BOUNDS)["requests"] == 1


def test_empty_selection_has_no_percentiles() -> None:
    summary = RollingStore().summarize(Selection("x", None, 0.0, 10.0), bounds=BOUNDS)
    assert summary["requests"] == 0
    assert summary["requests_per_s"] == 0.0
    assert summary["latency_us"]["request"]["p95"] is None


def test_slots_sum_ticks_and_idle_versions_store_nothing() -> None:
    store = RollingStore(slot_s=5.0)
    for t in range(100, 200):
        store.add_tick(
            float(t), {("m", 1): _delta(10, [10, 0, 0, 0]), ("m", 2): _delta(0, [0] * 4)}
        )
    assert store.versions("m") == [1]
    assert len(store._points[("m", 1)]) == 20
    summary = store.summarize(Selection("m", 1, 100.0, 199.0), bounds=BOUNDS)
    assert summary["requests"] == 1000
    assert summary["requests_per_s"] == pytest.approx(10.0)
