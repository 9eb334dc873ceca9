"""How many cores this process may really use: the CPUs it may be scheduled on, lowered to its
cgroup's CPU quota (a Kubernetes CPU limit, ``docker run --cpus``). ``os.cpu_count()`` counts the
node's cores, so a pod limited to 2 CPUs on a 64-core node would size ORT thread pools and the
tuner's instance sweep for 64 and be throttled. Pure Python, read once per call from ``/proc`` and
``/sys/fs/cgroup``; where neither says anything, the schedulable CPUs are the answer.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cpu_count(*, cgroup_root: Path = CGROUP_ROOT, proc_self: Path | None = None) -> int:
    """Whole cores this process may use: at least 1; a fractional quota rounds up (1.5 CPUs is
    2 threads' worth of work at 75 % each, better than one thread at most)."""
    schedulable = _schedulable_cpus()
    quota = cgroup_cpu_quota(cgroup_root=cgroup_root, proc_self=proc_self)
    if quota is None:
        return schedulable
    return max(1, min(schedulable, math.ceil(quota)))


def cgroup_cpu_quota(
    *, cgroup_root: Path = CGROUP_ROOT, proc_self: Path | None = None
) -> float | None:
    """CPUs' worth of time per period that the process's cgroup allows, ``None`` when unlimited
    or unknown. Every level up to the root is read, since a parent's limit binds its children."""
    paths = _cgroup_paths(proc_self or Path("/proc/self/cgroup"))
    limits = [
        limit
        for limit in (
            *_v2_limits(cgroup_root, paths.get("")),
            *_v1_limits(cgroup_root, paths.get("cpu")),
        )
        if limit is not None
    ]
    return min(limits) if limits else None


def _schedulable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cgroup_paths(proc_cgroup: Path) -> dict[str, str]:
    """Controller → the process's cgroup path (``""`` for the v2 unified hierarchy)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return {}
    found: dict[str, str] = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _levels(base: Path, path: str | None) -> list[Path]:
    """``base`` joined with ``path`` and every parent of it, deepest first."""
    if path is None:
        return []
    parts = [p for p in path.split("/") if p]
    return [base.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _v2_limits(root: Path, path: str | None) -> list[float | None]:
    return [_v2_limit(level / "cpu.max") for level in _levels(root, path)]


def _v2_limit(cpu_max: Path) -> float | None:
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max" or float(period) <= 0:
        return None
    return float(quota) / float(period)


def _v1_limits(root: Path, path: str | None) -> list[float | None]:
    # The v1 cpu controller is mounted as cpu, or jointly as "cpu,cpuacct".
    mounts = [m for m in (root / "cpu", root / "cpu,cpuacct") if m.is_dir()]
    return [_v1_limit(level) for mount in mounts[:1] for level in _levels(mount, path)]


def _v1_limit(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period
