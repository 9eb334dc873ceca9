"""Summarise each measured setting against the SLO and pick the one to recommend, saying why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from repository.tuning.loadgen import BUILT_IN
from repository.tuning.sweep import knee, meets


def setting_summary(
    *,
    setting: dict[str, Any],
    at_rate: dict[str, Any] | None,
    curve: list[dict[str, Any]],
    slo: dict[str, Any],
) -> dict[str, Any]:
    """One row of the tuner's table: the headline numbers are those at the expected rate (or at
    the knee when the SLO names no rate); ``capacity_per_s`` is the best throughput measured
    within the SLO."""
    headline = at_rate or knee(curve) or {}
    within = [p for p in [*curve, *([at_rate] if at_rate else [])] if meets(p, slo)]
    return {
        "setting": setting,
        "at_rate": at_rate,
        "curve": curve,
        "knee": knee(curve),
        "meets_slo": meets(at_rate, slo) if at_rate else bool(within),
        "capacity_per_s": max((p["throughput_per_s"] for p in within), default=0.0),
        "generator": headline.get("generator", BUILT_IN),
        **{
            key: headline.get(key, 0.0)
            for key in (
                "p50_ms",
                "p95_ms",
                "p99_ms",
                "throughput_per_s",
                "queue_ms",
                "compute_input_ms",
                "compute_infer_ms",
                "compute_output_ms",
                "error_rate",
            )
        },
    }


def recommend(results: Sequence[dict[str, Any]], slo: dict[str, Any]) -> dict[str, Any]:
    """The setting with the highest throughput within the SLO; fewer instances win a tie."""
    candidates = [r for r in results if r["meets_slo"] and r["capacity_per_s"] > 0]
    target = f"p{slo.get('percentile', 95)} ≤ {slo['latency_ms']:g} ms"
    if not candidates:
        return {
            "setting": None,
            "why": f"no setting met the SLO ({target}, error rate ≤ {slo['max_error_rate']:g}"
            f"{_rate(slo)}); the closest was {_closest(results, slo)}",
        }
    best = max(candidates, key=lambda r: (r["capacity_per_s"], -r["setting"]["instances"]))
    runner_up = max(
        (r for r in candidates if r is not best), key=lambda r: r["capacity_per_s"], default=None
    )
    why = (
        f"{best['setting']['label']} carries {best['capacity_per_s']:.0f} req/s within {target}"
        f"{_rate(slo)} (p{slo.get('percentile', 95)} {_pct(best, slo):.1f} ms at the expected "
        f"load), {_among(len(candidates))}"
    )
    if runner_up is not None:
        why += f"; next: {runner_up['setting']['label']} at {runner_up['capacity_per_s']:.0f} req/s"
    missed = len(results) - len(candidates)
    if missed:
        why += f"; {missed} setting(s) missed the SLO"
    return {"setting": best["setting"], "capacity_per_s": best["capacity_per_s"], "why": why}


def _among(count: int) -> str:
    if count == 1:
        return "the only setting that meets the SLO"
    return f"the most of the {count} settings that meet the SLO"


def _rate(slo: dict[str, Any]) -> str:
    rate = slo.get("expected_rate_per_s") or 0
    return f" at {rate:g} req/s" if rate else ""


def _pct(result: dict[str, Any], slo: dict[str, Any]) -> float:
    return float(result["p99_ms"] if slo.get("percentile") == 99 else result["p95_ms"])


def _closest(results: Sequence[dict[str, Any]], slo: dict[str, Any]) -> str:
    if not results:
        return "nothing (no setting was measured)"
    closest = min(results, key=lambda r: _pct(r, slo))
    return (
        f"{closest['setting']['label']} at p{slo.get('percentile', 95)} {_pct(closest, slo):.1f} ms"
    )
