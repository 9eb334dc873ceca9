"""The server's handle on one running model process: the process, its channel, the command reply.

Commands (``init``, ``execute``, ``is_ready``, ``finalize``) go one at a time (the instance holds
its lock) and their reply comes back through a queue filled by the channel's reader, which also
hands the model's own messages (BLS requests, decoupled responses) to the instance as they come.
"""

from __future__ import annotations

import queue
import subprocess
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from serving.backends.python import launch
from serving.backends.python.channel import Channel, ChannelClosed, Tensors

# The model process's answers to commands; anything else it sends is the model speaking first.
REPLIES = frozenset(("ready", "init_error", "executed", "execute_error", "is_ready", "finalized"))
_GONE = ("gone", None)

# (process, kind, payload, tensors) of a message the model sent on its own.
MessageHandler = Callable[["ModelProcess", str, Any, Tensors], None]


class ProcessGone(Exception):
    """The model's process died or stopped answering."""


class ModelProcess:
    """One running stub process and the server's end of its channel."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        conn: Connection,
        *,
        side_prefix: str,
        on_message: MessageHandler,
        on_close: Callable[[ModelProcess], None],
        name: str,
    ) -> None:
        self.process = process
        self.killed_for = ""
        self._replies: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._on_message = on_message
        self._on_close = on_close
        self.channel = Channel(
            conn,
            side_prefix=side_prefix,
            handle=self._received,
            on_close=self._closed,
            track=True,
            name=name,
        )
        self.channel.start()

    def request(self, kind: str, payload: Any, timeout_s: float | None) -> tuple[str, Any]:
        """Send one command and wait for its reply; kill the process after ``timeout_s``."""
        try:
            self.channel.send(kind, payload)
        except ChannelClosed:
            raise ProcessGone(self.exit_reason()) from None
        try:
            reply = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            self.kill(f"timed out after {timeout_s:g} s")
            raise ProcessGone(self.killed_for) from None
        if reply is _GONE:
            raise ProcessGone(self.exit_reason())
        return reply

    def kill(self, why: str) -> None:
        self.killed_for = why
        launch.kill(self.process)

    def exit_reason(self) -> str:
        if self.killed_for:
            return self.killed_for
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill("stopped answering")
            return self.killed_for
        return launch.exit_description(code)

    def close(self) -> None:
        """Kill the process and whatever it started, then release the channel."""
        launch.kill(self.process)
        self.process.wait()
        self.release()

    def release(self) -> None:
        """After the process ended: wait for the reader to stop, close the connection."""
        self.channel.join(timeout_s=5.0)
        self.channel.close()
        self.channel.conn.close()

    def _received(self, kind: str, payload: Any, tensors: Tensors) -> None:
        if kind in REPLIES:
            self._replies.put((kind, payload))
        else:
            self._on_message(self, kind, payload, tensors)

    def _closed(self) -> None:
        self._replies.put(_GONE)
        self._on_close(self)
