"""Fleet aggregation maths: rates add, percentiles from merged histograms, replicas come and go.

Replica payloads are produced by the serving side's own live-stats code from real ModelStatistics,
so these tests also pin the JSON contract between the two."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from console.collector.aggregate import (
    ReplicaSample,
    aggregate_fleet,
    merge_histograms,
    quantile,
    strip_histograms,
)
from serving.core.statistics import LATENCY_BUCKET_BOUNDS_US, ModelStatistics
from serving.observability.live_stats import LiveStats

pytestmark = pytest.mark.embedded

BOUNDS = list(LATENCY_BUCKET_BOUNDS_US)


@dataclasses.dataclass
class _Scheduler:
    queue_depth: int = 0
    in_flight: int = 0


@dataclasses.dataclass
class _Version:
    statistics: ModelStatistics
    scheduler: _Scheduler
    state: str = "READY"


class _Replica:
    """A replica's statistics, turned into its live-stats payload by the real serving code."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.live = LiveStats()
        self.versions: dict[tuple[str, int], _Version] = {}

    def version(self, model: str, version: int = 1, **scheduler: int) -> _Version:
        key = (model, version)
        if key not in self.versions:
            self.versions[key] = _Version(ModelStatistics(model, version), _Scheduler(**scheduler))
        return self.versions[key]

    def succeed(
        self, model: str, n: int, *, total_ms: float, queue_ms: float = 0.0, version: int = 1
    ) -> None:
        stats = self.version(model, version).statistics
        for _ in range(n):
            stats.record_success(
                total_ns=int(total_ms * 1e6),
                queue_ns=int(queue_ms * 1e6),
                compute_input_ns=0,
                compute_infer_ns=int((total_ms - queue_ms) * 1e6),
                compute_output_ns=0,
            )

    def mark(self, t: float) -> None:
        for v in self.versions.values():
            self.live.sample(v.statistics, now=t)

    def sample(self, t: float) -> ReplicaSample:
        entries = [self.live.version_entry(v, now=t) for v in self.versions.values()]
        payload = {
            "bucket_bounds_us": BOUNDS,
            "replica": {"hostname": self.name},
            "models": entries,
        }
        return ReplicaSample(replica_id=self.name, url=f"http://{self.name}", payload=payload)


def _two_replicas() -> tuple[_Replica, _Replica]:
    a, b = _Replica("a"), _Replica("b")
    a.version("m", queue_depth=2, in_flight=5)
    b.version("m", queue_depth=3, in_flight=1)
    a.mark(0.0)
    b.mark(0.0)
    return a, b


def test_rates_and_queue_depths_add_across_replicas() -> None:
    a, b = _two_replicas()
    a.succeed("m", 100, total_ms=1)
    b.succeed("m", 50, total_ms=1)
    frame = aggregate_fleet([a.sample(10.0), b.sample(10.0)])
    combined = frame["models"]["m"]["combined"]
    assert combined["requests_per_s"] == pytest.approx(15.0)
    assert combined["queue_depth"] == 5
    assert combined["in_flight"] == 6
    assert frame["models"]["m"]["replicas_up"] == 2
    assert frame["models"]["m"]["by_replica"]["a"]["requests_per_s"] == pytest.approx(10.0)
    assert frame["models"]["m"]["by_replica"]["b"]["requests_per_s"] == pytest.approx(5.0)


def test_percentiles_come_from_merged_histograms_not_averaged_percentiles() -> None:
    a, b = _two_replicas()
    a.succeed("m", 190, total_ms=1)  # a fast replica
    b.succeed("m", 10, total_ms=100)  # and a slow one with little traffic
    frame = aggregate_fleet([a.sample(10.0), b.sample(10.0)])
    p = frame["models"]["m"]["combined"]["latency_us"]["request"]
    by_replica = frame["models"]["m"]["by_replica"]
    averaged_p50 = (
        by_replica["a"]["latency_us"]["request"]["p50"]
        + by_replica["b"]["latency_us"]["request"]["p50"]
    ) / 2
    # 95 % of all requests took 1 ms: the fleet p50 and p95 are 1 ms-ish, not the ~50 ms an average
    # of the two replicas' p50s would claim; only p99 reaches into the slow replica's bucket.
    assert p["p50"] < 1500 and averaged_p50 > 40_000
    assert p["p95"] < 1500
    assert p["p99"] > 60_000
    assert p["mean"] == pytest.approx((190 * 1000 + 10 * 100_000) / 200)


def test_replica_that_goes_away_drops_out_of_the_next_frame() -> None:
    a, b = _two_replicas()
    a.succeed("m", 100, total_ms=1)
    b.succeed("m", 100, total_ms=50)
    both = aggregate_fleet([a.sample(10.0), b.sample(10.0)])
    assert both["models"]["m"]["combined"]["requests_per_s"] == pytest.approx(20.0)
    down = ReplicaSample(replica_id="b", url="http://b", payload=None, error="timed out")
    after = aggregate_fleet([a.sample(10.0), down])
    model = after["models"]["m"]
    assert model["combined"]["requests_per_s"] == pytest.approx(10.0)
    assert model["combined"]["latency_us"]["request"]["p99"] < 1500  # b's slow requests are gone
    assert model["replicas_up"] == 1
    assert list(model["by_replica"]) == ["a"]
    assert [(r["id"], r["up"], r["error"]) for r in after["replicas"]] == [
        ("a", True, ""),
        ("b", False, "timed out"),
    ]
    # and a replica no longer heartbeating is simply not sampled: nothing of it remains
    gone = aggregate_fleet([a.sample(10.0)])
    assert [r["id"] for r in gone["replicas"]] == ["a"]


def test_model_on_one_replica_only_and_versions_are_kept_apart() -> None:
    a, b = _two_replicas()
    a.succeed("m", 30, total_ms=1, version=1)
    b.version("m", 2)
    b.mark(0.0)
    b.succeed("m", 10, total_ms=1, version=2)
    a.version("other")
    frame = aggregate_fleet([a.sample(10.0), b.sample(10.0)])
    by_version = frame["models"]["m"]["by_version"]
    assert by_version["1"]["requests_per_s"] == pytest.approx(3.0)
    assert by_version["2"]["requests_per_s"] == pytest.approx(1.0)
    assert frame["models"]["m"]["versions"] == {"1": ["READY"], "2": ["READY"]}
    assert frame["models"]["other"]["replicas_up"] == 1


def test_replica_with_other_histogram_bounds_is_not_merged() -> None:
    a, b = _two_replicas()
    a.succeed("m", 10, total_ms=1)
    b.succeed("m", 10, total_ms=1)
    odd = b.sample(10.0)
    odd = dataclasses.replace(odd, payload={**odd.payload, "bucket_bounds_us": [1.0, 2.0]})  # type: ignore[dict-item]
    frame = aggregate_fleet([a.sample(10.0), odd])
    assert frame["models"]["m"]["combined"]["requests_per_s"] == pytest.approx(1.0)
    assert frame["replicas"][1]["error"] == "histogram bounds differ"


def test_batch_sizes_release_reasons_and_errors_add_up() -> None:
    a, b = _two_replicas()
    for replica, size in ((a, 4), (b, 4), (b, 8)):
        replica.version("m").statistics.record_execution(
            batch_size=size,
            compute_input_ns=1,
            compute_infer_ns=1,
            compute_output_ns=1,
            release_reason="preferred_size",
        )
    a.version("m").statistics.record_failure(reason="BACKEND", total_ns=10)
    b.version("m").statistics.record_failure(reason="BACKEND", total_ns=10)
    combined = aggregate_fleet([a.sample(10.0), b.sample(10.0)])["models"]["m"]["combined"]
    assert combined["batch_sizes"] == {"4": 2, "8": 1}
    assert combined["release_reasons"] == {"preferred_size": 3}
    assert combined["failures_by_reason"] == {"BACKEND": 2}
    assert combined["failures_per_s"] == pytest.approx(0.2)


def test_no_replicas_gives_an_empty_frame() -> None:
    frame: dict[str, Any] = aggregate_fleet([])
    assert frame["models"] == {} and frame["replicas"] == []


def test_browser_frame_has_no_raw_histograms() -> None:
    a, b = _two_replicas()
    a.succeed("m", 10, total_ms=1)
    browser = strip_histograms(aggregate_fleet([a.sample(10.0), b.sample(10.0)]))
    assert "histograms" not in browser["models"]["m"]["combined"]
    assert "histograms" not in browser["models"]["m"]["by_replica"]["a"]
    assert browser["models"]["m"]["combined"]["latency_us"]["request"]["p50"] is not None


def test_merge_histograms_pads_shorter_lists() -> None:
    assert merge_histograms([[1, 2], [3, 4, 5], []]) == [4, 6, 5]
    assert merge_histograms([]) == []


def test_quantile_of_merged_counts() -> None:
    bounds = [10.0, 100.0]
    assert quantile([50, 50, 0], 0.5, bounds) == pytest.approx(10.0)
    assert quantile([50, 50, 0], 0.75, bounds) == pytest.approx(55.0)
    assert quantile([0, 0, 1], 0.5, bounds) == 100.0
    assert quantile([], 0.5, bounds) is None
