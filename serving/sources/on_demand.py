"""Which versions loaded on demand a replica keeps (registry mode).

A request may name any loadable version of a model (``/versions/N/infer``); the replica loads it
next to the promoted one. So that naming versions cannot fill a replica's memory, each model keeps
at most ``on_demand_max_versions`` such extra versions: loading one more first evicts the least
recently used, and one unused for ``on_demand_idle_s`` unloads. "Used" is the last inference, or
the load when none came since; a version with requests in flight counts as used now.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from serving.core.model_table import READY, LoadedVersion


def last_used_s(lv: LoadedVersion | None, *, now_s: float) -> float:
    """When ``lv`` last served (wall clock); a version not loaded counts as never used."""
    if lv is None or lv.state != READY:
        return 0.0
    if lv.in_flight:
        return now_s
    return max(lv.loaded_at, lv.statistics.last_inference_ms / 1000)


def least_recently_used(
    extra: set[int], loaded: Mapping[int, LoadedVersion], *, keep: int
) -> set[int]:
    """The versions of ``extra`` to evict so that at most ``keep`` stay, oldest use first."""
    now_s = time.time()
    by_age = sorted(extra, key=lambda v: (last_used_s(loaded.get(v), now_s=now_s), v))
    return set(by_age[: max(0, len(extra) - keep)])


def idle_versions(
    extra: set[int], loaded: Mapping[int, LoadedVersion], *, idle_s: float
) -> set[int]:
    """The versions of ``extra`` unused for at least ``idle_s``."""
    now_s = time.time()
    return {v for v in extra if now_s - last_used_s(loaded.get(v), now_s=now_s) >= idle_s}
