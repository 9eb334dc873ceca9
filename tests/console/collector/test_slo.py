"""SLO status from the rolling store: meeting, burning (missed over the last 5 minutes) and
breached (missed over the hour), errors counted against the error budget."""

from __future__ import annotations

import pytest

from console.collector.rolling import Delta, RollingStore
from console.collector.slo import slo_statuses

pytestmark = pytest.mark.embedded

BOUNDS = [1000.0, 10_000.0, 100_000.0]  # µs: 1 ms, 10 ms, 100 ms, then +Inf
SLO = {"percentile": 95, "latency_ms": 20.0, "max_error_rate": 0.01, "expected_rate_per_s": 0}
NOW = 10_000.0


def delta(fast: int, slow: int, failures: int = 0) -> Delta:
    """``fast`` requests under 10 ms, ``slow`` between 10 and 100 ms."""
    hist = [0, fast, slow, 0]
    return Delta(
        requests=fast + slow,
        failures=failures,
        inferences=fast + slow,
        histograms={"request": hist, "queue": hist, "compute_infer": hist},
        sums_us={"request": 0.0, "queue": 0.0, "compute_infer": 0.0},
    )


def status(*ticks: tuple[float, Delta]) -> dict:  # type: ignore[type-arg]
    store = RollingStore(slot_s=5.0)
    for t, d in ticks:
        store.add_tick(t, {("m", 1): d})
    return slo_statuses(store, {"m": SLO}, bounds=BOUNDS, now=NOW)["m"]


def test_fast_traffic_meets_the_slo() -> None:
    result = status((NOW - 1200, delta(1000, 0)), (NOW - 60, delta(1000, 0)))
    assert result["status"] == "meeting" and result["short"]["latency_ms"] <= 10


def test_a_slow_last_five_minutes_burns_before_the_hour_breaches() -> None:
    result = status((NOW - 1800, delta(5000, 0)), (NOW - 60, delta(100, 100)))
    assert result["status"] == "burning"
    assert result["short"]["ok"] is False and result["long"]["ok"] is True


def test_an_hour_of_slow_traffic_is_breached() -> None:
    assert status((NOW - 1800, delta(10, 100)), (NOW - 60, delta(1000, 0)))["status"] == "breached"


def test_errors_beyond_the_budget_breach_it_and_no_traffic_says_so() -> None:
    assert status((NOW - 60, delta(100, 0, failures=5)))["status"] == "breached"
    assert status()["status"] == "no traffic"
