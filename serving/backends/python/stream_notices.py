"""What the server tells a Python model's process about its decoupled requests' streams: a
client went away (``cancel``), or its responses must wait (``flow``, held back or let go).

Sent from one thread per instance, in the order they were given: off the loop (the socket may be
busy with a large execute message), and never reordered (a "let go" overtaking its "hold back"
would leave the model's sender waiting until the stream times out).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any

from serving.backends.python.channel import ChannelClosed
from serving.backends.python.process import ModelProcess

_STOP = None


class StreamNotices:
    """One instance's notices, sent in order by a thread started on the first one."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[tuple[ModelProcess, str, Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def send(self, child: ModelProcess, kind: str, payload: Any) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"notices-{self._name}", daemon=True
                )
                self._thread.start()
        self._queue.put((child, kind, payload))

    def close(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._queue.put(_STOP)

    def _run(self) -> None:
        while (notice := self._queue.get()) is not _STOP:
            child, kind, payload = notice
            with contextlib.suppress(ChannelClosed):  # that process is gone: nothing to tell
                child.channel.send(kind, payload)
