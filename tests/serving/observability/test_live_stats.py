"""Live stats windows computed from a real ModelStatistics, and the replica JSON."""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

import orjson
import pytest

from serving.core.statistics import LATENCY_BUCKET_BOUNDS_US, ModelStatistics
from serving.observability.live_stats import (
    LiveStats,
    live_stats,
    live_stats_json,
    quantile_us,
    sample_all,
)

pytestmark = pytest.mark.embedded


def _succeed(stats: ModelStatistics, n: int, *, total_us: int, queue_us: int = 0) -> None:
    for _ in range(n):
        stats.record_success(
            total_ns=total_us * 1000,
            queue_ns=queue_us * 1000,
            compute_input_ns=1000,
            compute_infer_ns=(total_us - queue_us) * 1000,
            compute_output_ns=1000,
        )


@dataclasses.dataclass
class _Scheduler:
    queue_depth: int = 0
    in_flight: int = 0


@dataclasses.dataclass
class _Version:
    statistics: ModelStatistics
    scheduler: _Scheduler = dataclasses.field(default_factory=_Scheduler)
    state: str = "READY"


class _Server:
    """The part of InferenceServer live stats reads: its loaded versions."""

    def __init__(self, *versions: _Version) -> None:
        self.versions = list(versions)

    def loaded_versions(self) -> list[_Version]:
        return self.versions


def test_ten_second_window_counts_only_requests_inside_it() -> None:
    stats = ModelStatistics("m", 1)
    live = LiveStats()
    version = _Version(stats)
    _succeed(stats, 50, total_us=1000)
    for t in range(0, 21):
        if t >= 12:
            _succeed(stats, 5, total_us=2000)
        live.sample(stats, now=float(t))
    entry = live.version_entry(version, now=21.0)
    ten = entry["windows"]["10"]
    sixty = entry["windows"]["60"]
    # Snapshots at 11..21: the 10 s window saw the 5 req/s burst only.
    assert ten["requests"] == 45
    assert ten["requests_per_s"] == pytest.approx(4.5)
    # The 60 s window reaches back to the first snapshot (t=0, after the first 50).
    assert sixty["duration_s"] == 21.0
    assert sixty["requests"] == 45
    assert entry["totals"]["requests"] == 95


def test_window_percentiles_come_from_the_window_histogram() -> None:
    stats = ModelStatistics("m", 1)
    live = LiveStats()
    _succeed(stats, 1000, total_us=100_000)  # old slow traffic, outside the window
    live.sample(stats, now=0.0)
    _succeed(stats, 90, total_us=1000, queue_us=400)
    _succeed(stats, 10, total_us=20_000, queue_us=10_000)
    entry = live.version_entry(_Version(stats), now=5.0)
    latency = entry["windows"]["10"]["latency_us"]
    assert 961 < latency["request"]["p50"] <= 1442  # the bucket holding 1 ms
    assert 12_000 < latency["request"]["p99"] <= 25_000
    assert latency["queue"]["p50"] < 500
    assert latency["request"]["mean"] == pytest.approx(0.9 * 1000 + 0.1 * 20_000)
    assert sum(entry["windows"]["10"]["histograms"]["request"]) == 100


def test_batch_mix_release_reasons_and_failures_are_windowed() -> None:
    stats = ModelStatistics("m", 2)
    live = LiveStats()
    stats.record_execution(
        batch_size=8,
        compute_input_ns=1,
        compute_infer_ns=1,
        compute_output_ns=1,
        release_reason="max_queue_delay",
    )
    live.sample(stats, now=0.0)
    for size, reason in ((4, "preferred_size"), (4, "preferred_size"), (1, "max_queue_delay")):
        stats.record_execution(
            batch_size=size,
            compute_input_ns=1,
            compute_infer_ns=1,
            compute_output_ns=1,
            release_reason=reason,
        )
    stats.record_failure(reason="REJECTED", total_ns=1000)
    stats.record_failure(reason="BACKEND", total_ns=1000)
    stats.record_failure(reason="BACKEND", total_ns=1000)
    window = live.version_entry(_Version(stats), now=2.0)["windows"]["10"]
    assert window["batch_sizes"] == {"1": 1, "4": 2}
    assert window["release_reasons"] == {"max_queue_delay": 1, "preferred_size": 2}
    assert window["failures_by_reason"] == {"BACKEND": 2, "REJECTED": 1}
    assert window["failures_per_s"] == pytest.approx(1.5)
    assert window["executions_per_s"] == pytest.approx(1.5)
    assert window["inferences_per_s"] == pytest.approx(4.5)


def test_first_poll_reports_an_empty_window_not_everything_since_load() -> None:
    stats = ModelStatistics("m", 1)
    _succeed(stats, 10, total_us=500)
    window = LiveStats().version_entry(_Version(stats), now=100.0)["windows"]["10"]
    assert window["requests"] == 0
    assert window["requests_per_s"] == 0.0
    assert window["latency_us"]["request"]["p95"] is None


def test_replica_json_lists_every_version_with_queue_and_in_flight() -> None:
    a1, b3 = ModelStatistics("b", 3), ModelStatistics("a", 1)
    server = _Server(_Version(a1, _Scheduler(queue_depth=4, in_flight=6)), _Version(b3))
    sample_all(server)
    payload: dict[str, Any] = orjson.loads(live_stats_json(server))
    assert [(m["model"], m["version"]) for m in payload["models"]] == [("a", 1), ("b", 3)]
    assert payload["models"][1]["queue_depth"] == 4
    assert payload["models"][1]["in_flight"] == 6
    assert payload["models"][0]["state"] == "READY"
    assert payload["bucket_bounds_us"] == list(LATENCY_BUCKET_BOUNDS_US)
    assert 0.0 <= payload["system"]["cpu_utilization"] <= 1.0
    assert payload["system"]["cpu_memory_total_bytes"] > 0
    assert payload["windows_s"] == [10, 60]


def test_server_model_table_mapping_is_also_understood() -> None:
    stats = ModelStatistics("m", 1)

    class _TableServer:
        models = {"m": {1: _Version(stats)}}

    assert [m["model"] for m in live_stats(_TableServer())["models"]] == ["m"]


def test_unloaded_version_ring_is_released() -> None:
    live = LiveStats()
    stats = ModelStatistics("m", 1)
    live.sample(stats, now=0.0)
    assert len(live._rings) == 1
    del stats
    gc.collect()
    assert len(live._rings) == 0


def test_quantile_interpolates_inside_the_bucket_and_caps_infinity() -> None:
    bounds = [10.0, 20.0, 40.0]
    assert quantile_us([0, 0, 0, 0], 0.5, bounds) is None
    assert quantile_us([0, 10, 0, 0], 0.5, bounds) == pytest.approx(15.0)
    assert quantile_us([10, 0, 0, 0], 1.0, bounds) == pytest.approx(10.0)
    assert quantile_us([0, 0, 0, 5], 0.99, bounds) == 40.0
