"""Running a service in a thread of its own (its own database connection) for race tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections


def in_thread(target: Callable[[], Any], results: dict[str, Any], key: str) -> threading.Thread:
    """Start ``target`` in a thread; its return value or exception lands in ``results[key]``."""

    def run() -> None:
        try:
            results[key] = target()
        except Exception as error:  # noqa: BLE001 - the test's assertions name it
            results[key] = error
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=f"race-{key}")
    thread.start()
    return thread
