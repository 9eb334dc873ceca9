"""Resource limits of the check child, applied in the child before it execs (and so inherited by
bubblewrap and everything the model starts)."""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import resource
import signal
import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings

PR_SET_PDEATHSIG = 1


@dataclasses.dataclass(frozen=True)
class CheckLimits:
    """What one check may use. Zero means "no limit" for every field but the wall clock.

    Memory is per process (RLIMIT_AS); processes count those of the sandbox's own user namespace
    (RLIMIT_NPROC, which the kernel does not apply to root: run the worker as a plain user);
    scratch bounds the writable tmpfs folders (home, /tmp and /dev/shm, each).
    """

    time_limit_s: float
    memory_limit_bytes: int
    cpu_limit_s: int = 0
    max_processes: int = 0
    max_open_files: int = 0
    max_file_bytes: int = 0
    scratch_bytes: int = 0

    @classmethod
    def from_settings(cls) -> CheckLimits:
        return cls(
            time_limit_s=float(settings.PORTICO_VALIDATION_TIME_LIMIT_S),
            memory_limit_bytes=int(settings.PORTICO_VALIDATION_MEMORY_LIMIT_BYTES),
            cpu_limit_s=int(settings.PORTICO_VALIDATION_CPU_LIMIT_S),
            max_processes=int(settings.PORTICO_VALIDATION_MAX_PROCESSES),
            max_open_files=int(settings.PORTICO_VALIDATION_MAX_OPEN_FILES),
            max_file_bytes=int(settings.PORTICO_VALIDATION_MAX_FILE_BYTES),
            scratch_bytes=int(settings.PORTICO_VALIDATION_SCRATCH_BYTES),
        )

    def rlimits(self) -> list[tuple[int, int]]:
        wanted = [
            (resource.RLIMIT_AS, self.memory_limit_bytes),
            (resource.RLIMIT_CPU, self.cpu_limit_s),
            (resource.RLIMIT_NPROC, self.max_processes),
            (resource.RLIMIT_NOFILE, self.max_open_files),
            (resource.RLIMIT_FSIZE, self.max_file_bytes),
        ]
        return [(which, value) for which, value in wanted if value > 0]


def child_setup(limits: CheckLimits) -> Callable[[], None]:
    """Runs in the child between fork and exec: the limits, and die if the worker dies."""
    libc = _libc()
    rlimits = limits.rlimits()

    def apply() -> None:
        for which, value in rlimits:
            resource.setrlimit(which, (value, value))
        if libc is not None:
            # NOTE: a worker killed mid-validation must not leave its check running unwatched.
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return apply


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
