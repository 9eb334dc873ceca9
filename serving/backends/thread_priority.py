"""Build a runtime whose own threads run at a lower CPU priority (a higher nice value).

A runtime's pool threads (ONNX Runtime's intra-op helpers) spin between runs so the next run
starts at once. On a host whose cores are all busy that spin competes, at equal priority, with
the serving loop and the protocol threads that feed it. At a higher nice value the scheduler
gives the spin the cores only when nothing else wants them: a lone client keeps the spin's low
latency (the cores are idle then), a loaded host gives the protocol work the cores.

Linux keeps a nice value per thread, and a thread starts with its creator's. So the runtime is
built on a short-lived thread of its own whose nice value is raised first: the pool threads the
runtime creates inherit it, and no other thread's priority changes (an unprivileged process can
raise a nice value but never lower it again, so the loading thread itself must not be touched).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

logger = logging.getLogger(__name__)

MAX_NICE = 19  # the kernel's lowest priority for normal threads


def supported() -> bool:
    """Per-thread nice values are Linux's; elsewhere the nice value is the whole process's."""
    return sys.platform == "linux"


def built_at_nice(build: Callable[[], T], nice: int, *, name: str = "runtime-build") -> T:
    """``build()``'s result, built on a thread whose nice value is raised by ``nice`` (0 builds
    on the calling thread, as without this). Its exception is raised here. Where the priority
    cannot be lowered (not Linux, or a sandbox that refuses it) it is built at the caller's
    priority, with a warning: a priority is never a reason for a model not to load."""
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"a nice value from 0 to {MAX_NICE}, got {nice}")
    if nice == 0:
        return build()
    if not supported():
        logger.warning("%s: pool threads keep the process's priority (per-thread priorities "
                       "are Linux's, not %s's)", name, sys.platform)  # fmt: skip
        return build()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def build_lowered() -> None:
        try:
            _lower_this_thread(nice, name)
            outcome.append(build())
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread below
            failure.append(error)

    thread = threading.Thread(target=build_lowered, name=name, daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def _lower_this_thread(nice: int, name: str) -> None:
    me = threading.get_native_id()
    try:
        os.setpriority(
            os.PRIO_PROCESS, me, min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, me) + nice)
        )
    except OSError as error:
        logger.warning("%s: pool threads keep the process's priority: %s", name, error)
