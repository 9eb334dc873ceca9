"""What the tuner tries and what it recommends: pure functions over configs and results.

The batching settings follow the usual advice: batching off, a low wait and a high wait, the waits
derived from the compute time measured with batching off (half of one execution, and two
executions), never fixed numbers; each with instance counts 1..N. Every setting is measured at the
expected arrival rate and at rising concurrency until throughput stops growing (the knee).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from repository.config.parse import config_to_text, parse_config_text

BATCHING_MODES = ("off", "low", "high")
LOW_WAIT_FACTOR = 0.5
HIGH_WAIT_FACTOR = 2.0
MIN_WAIT_US = 50
# The knee: the concurrency after which one more doubling adds less than this much throughput.
KNEE_GAIN = 0.10


@dataclasses.dataclass(frozen=True)
class Setting:
    """One point of the sweep: the batching mode and its wait, preferred sizes, instance count."""

    batching: str
    instances: int
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        wait = "" if self.batching == "off" else f" ({self.max_queue_delay_us} µs)"
        preferred = (
            f", preferred {list(self.preferred_batch_sizes)}" if self.preferred_batch_sizes else ""
        )
        noun = "instance" if self.instances == 1 else "instances"
        return f"batching {self.batching}{wait}{preferred} × {self.instances} {noun}"

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "label": self.label}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Setting:
        return cls(
            batching=data["batching"],
            instances=int(data["instances"]),
            max_queue_delay_us=int(data.get("max_queue_delay_us", 0)),
            preferred_batch_sizes=tuple(data.get("preferred_batch_sizes", ())),
        )


def can_batch(config_text: str) -> bool:
    return parse_config_text(config_text).max_batch_size > 0


def probe_setting() -> Setting:
    """Measured first: its compute time sets the waits of the others."""
    return Setting(batching="off", instances=1)


def plan(
    *,
    config_text: str,
    compute_ms: float,
    batching: Sequence[str],
    instances: Sequence[int],
    preferred_batch_sizes: Sequence[int],
) -> list[Setting]:
    """Every setting of the sweep, the probe first."""
    modes = [m for m in batching if m == "off" or can_batch(config_text)]
    waits = {
        "off": 0,
        "low": max(MIN_WAIT_US, round(compute_ms * 1000 * LOW_WAIT_FACTOR, -1)),
        "high": max(MIN_WAIT_US, round(compute_ms * 1000 * HIGH_WAIT_FACTOR, -1)),
    }
    preferred_options: list[tuple[int, ...]] = [()]
    if preferred_batch_sizes:
        preferred_options.append(tuple(sorted(preferred_batch_sizes)))
    settings = [probe_setting()]
    for count in instances:
        for mode in modes:
            for preferred in preferred_options if mode != "off" else [()]:
                setting = Setting(mode, count, int(waits[mode]), preferred)
                if setting not in settings:
                    settings.append(setting)
    return settings


def tuned_config_text(config_text: str, setting: Setting) -> str:
    """``config_text`` with exactly the setting's fields changed: dynamic batching and the
    instance count (every group keeps its kind and devices)."""
    cfg = parse_config_text(config_text)
    if setting.batching == "off":
        cfg.ClearField("dynamic_batching")
    else:
        cfg.dynamic_batching.max_queue_delay_microseconds = setting.max_queue_delay_us
        del cfg.dynamic_batching.preferred_batch_size[:]
        cfg.dynamic_batching.preferred_batch_size.extend(setting.preferred_batch_sizes)
    if not cfg.instance_group:
        cfg.instance_group.add(count=setting.instances)
    for group in cfg.instance_group:
        group.count = setting.instances
    return str(config_to_text(cfg))


def concurrency_levels(max_concurrency: int) -> list[int]:
    levels, level = [], 1
    while level <= max_concurrency:
        levels.append(level)
        level *= 2
    return levels


def knee(curve: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The last point of the curve whose throughput grew by ``KNEE_GAIN`` over the one before it."""
    if not curve:
        return None
    best = curve[0]
    for point in curve[1:]:
        if point["throughput_per_s"] < best["throughput_per_s"] * (1 + KNEE_GAIN):
            break
        best = point
    return best


def curve_done(curve: Sequence[dict[str, Any]], slo: dict[str, Any]) -> bool:
    """Stop raising concurrency once past the knee or beyond the SLO's latency."""
    if len(curve) < 2:
        return False
    last = curve[-1]
    return knee(curve) is not last or _latency(last, slo) > slo["latency_ms"]


def meets(point: dict[str, Any] | None, slo: dict[str, Any]) -> bool:
    return (
        point is not None
        and point["requests"] > 0
        and _latency(point, slo) <= slo["latency_ms"]
        and point["error_rate"] <= slo["max_error_rate"]
    )


def _latency(point: dict[str, Any], slo: dict[str, Any]) -> float:
    return float(point["p99_ms"] if slo.get("percentile") == 99 else point["p95_ms"])
