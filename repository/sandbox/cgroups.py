"""A control group per check: the processes and memory of everything the check starts, together.

rlimits bound each process on its own, and the kernel exempts root from ``RLIMIT_NPROC``; a cgroup
bounds their sum whoever runs the worker. The check joins the group between fork and exec, so
bubblewrap and everything the model starts are born inside it and cannot leave it (the sandbox
drops every capability). Where no cgroup can be made (no cgroup v1 ``pids``/``memory`` hierarchy
this process may write, e.g. an unprivileged worker), the rlimits alone apply: ``create`` answers
None and the worker logs it once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from repository.sandbox.limits import CheckLimits

logger = logging.getLogger(__name__)

CGROUP_V1_ROOT = Path("/sys/fs/cgroup")
PREFIX = "portico-check-"
# A group this old with nobody inside was left by a worker that was killed before it could remove
# it; a check joins its group within milliseconds of making it, so a young empty one is in use.
ABANDONED_AFTER_S = 60.0
_warned = False


class CheckCgroup:
    """One check's groups in the v1 ``pids`` and ``memory`` hierarchies (whichever can be made)."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, limits: CheckLimits, *, root: Path = CGROUP_V1_ROOT) -> CheckCgroup | None:
        _sweep_abandoned(root)
        name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        wanted = [
            ("pids", "pids.max", limits.max_processes),
            ("memory", "memory.limit_in_bytes", limits.memory_limit_bytes),
        ]
        dirs: list[Path] = []
        for controller, limit_file, value in wanted:
            if value <= 0:
                continue
            made = _make(root / controller / name, limit_file, value)
            if made is not None:
                dirs.append(made)
        if not dirs:
            _warn_once()
            return None
        return cls(dirs)

    def joiner(self) -> Callable[[], None]:
        """For the child between fork and exec: move itself into every group."""
        files = [str(d / "cgroup.procs") for d in self.dirs]

        def join() -> None:
            pid = str(os.getpid()).encode()
            for path in files:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, pid)
                finally:
                    os.close(fd)

        return join

    def close(self) -> None:
        """Kill whatever is still inside, then remove the groups."""
        for directory in self.dirs:
            _empty(directory)
            with contextlib.suppress(OSError):
                directory.rmdir()


def _sweep_abandoned(root: Path) -> None:
    now = time.time()
    for directory in root.glob(f"*/{PREFIX}*"):
        try:
            if now - directory.stat().st_mtime < ABANDONED_AFTER_S:
                continue
            if not (directory / "cgroup.procs").read_text().strip():
                directory.rmdir()
        except OSError:
            continue


def _make(directory: Path, limit_file: str, value: int) -> Path | None:
    try:
        directory.mkdir()
    except OSError:
        return None
    try:
        (directory / limit_file).write_text(str(value))
    except OSError:
        with contextlib.suppress(OSError):
            directory.rmdir()
        return None
    return directory


def _empty(directory: Path, *, attempts: int = 50) -> None:
    for _ in range(attempts):
        try:
            pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        logger.warning(
            "validation: no cgroup can be made under %s; each check's processes and memory are "
            "bounded per process only (rlimits), and RLIMIT_NPROC does not apply to root",
            CGROUP_V1_ROOT,
        )
