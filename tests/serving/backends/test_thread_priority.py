"""``built_at_nice``: the threads a runtime creates while it is built run at the raised nice
value; the thread that asked for it keeps its own."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from serving.backends import thread_priority
from serving.backends.thread_priority import built_at_nice

pytestmark = [
    pytest.mark.embedded,
    pytest.mark.skipif(
        not thread_priority.supported(), reason="per-thread nice values are Linux's"
    ),
]


def nice_of(thread_id: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, thread_id)


def _start_a_pool() -> tuple[threading.Thread, threading.Event, list[int]]:
    """What a runtime does while it is built: start a thread that outlives the build."""
    seen: list[int] = []
    release = threading.Event()

    def pool_thread() -> None:
        seen.append(nice_of(threading.get_native_id()))
        release.wait(10)

    thread = threading.Thread(target=pool_thread)
    thread.start()
    return thread, release, seen


def test_the_threads_the_build_starts_run_at_the_raised_nice() -> None:
    own = nice_of(threading.get_native_id())
    thread, release, seen = built_at_nice(_start_a_pool, 5)
    try:
        assert nice_of(thread.native_id) == min(19, own + 5)  # still, while it runs
    finally:
        release.set()
        thread.join()
    assert seen == [min(19, own + 5)]
    assert nice_of(threading.get_native_id()) == own  # the caller's stays as it was


def test_nice_zero_builds_on_the_calling_thread() -> None:
    assert built_at_nice(threading.get_ident, 0) == threading.get_ident()
    assert built_at_nice(threading.get_ident, 3) != threading.get_ident()


def test_the_builds_exception_is_raised_to_the_caller() -> None:
    def broken() -> None:
        raise FileNotFoundError("model.onnx")

    with pytest.raises(FileNotFoundError, match="model.onnx"):
        built_at_nice(broken, 4)


@pytest.mark.parametrize("nice", [-1, 20])
def test_a_nice_value_outside_0_to_19_is_refused(nice: int) -> None:
    with pytest.raises(ValueError, match="a nice value from 0 to 19"):
        built_at_nice(lambda: None, nice)


def test_a_priority_the_system_refuses_builds_at_the_callers_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # As a sandbox whose seccomp filter refuses setpriority would: the model still loads.
    def refused(*args: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refused)
    own = nice_of(threading.get_native_id())
    with caplog.at_level(logging.WARNING, logger="serving.backends.thread_priority"):
        thread, release, seen = built_at_nice(_start_a_pool, 5, name="load-mlp")
    release.set()
    thread.join()
    assert seen == [own]
    assert "load-mlp: pool threads keep the process's priority" in caplog.text
