"""One end of the socket between the server and a Python model's process (both sides use it).

A reader thread owns receiving and hands every message to the side's ``handle`` callback in
arrival order, so either side may speak first: the server sends commands (``execute``) and the
model's process answers, but the model may also send BLS requests and decoupled responses at any
time, from any thread. Tensors of the execute call itself travel through the instance's two
request/reply regions (``shm.py``); tensors of everything else are *posted* through this side's
own region: the poster keeps the region until the peer acknowledges that it copied them out, so
one region serves any number of threads. Imports only the standard library, numpy and ``shm``.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from serving.backends.python import shm

logger = logging.getLogger(__name__)

Tensors = dict[str, np.ndarray[Any, Any]]
Handler = Callable[[str, Any, Tensors], None]


class ChannelClosed(Exception):
    """The peer went away (its process died or closed the socket)."""


class Channel:
    """Messages both ways over one connection; ``handle(kind, payload, tensors)`` receives."""

    def __init__(
        self,
        conn: Connection,
        *,
        side_prefix: str,
        handle: Handler,
        on_close: Callable[[], None],
        track: bool,
        name: str,
    ) -> None:
        self.conn = conn
        self.closed = False
        self._handle = handle
        self._on_close = on_close
        self._send_lock = threading.Lock()
        self._side = shm.Region(side_prefix, track=track)
        self._side_lock = threading.Lock()
        self._peer = shm.Reader(track=False)
        self._post_ids = itertools.count(1)
        self._acks: dict[int, threading.Event] = {}
        self._thread = threading.Thread(target=self._read, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def send(self, kind: str, payload: Any = None) -> None:
        """A message without tensors (commands, replies, small results)."""
        with self._send_lock:
            try:
                self.conn.send((kind, payload))
            except (OSError, ValueError) as error:
                raise ChannelClosed(str(error)) from error

    def post(
        self, kind: str, payload: Any, tensors: list[tuple[str, np.ndarray[Any, Any]]]
    ) -> None:
        """Send ``kind`` with ``tensors`` through this side's region; returns once the peer has
        copied them out (or raises ChannelClosed)."""
        post_id = next(self._post_ids)
        acked = threading.Event()
        with self._side_lock:
            self._acks[post_id] = acked
            if self.closed:  # NOTE: checked after registering: the reader wakes every waiter
                self._acks.pop(post_id, None)
                raise ChannelClosed("the peer went away")
            try:
                descs = self._side.write(tensors)
            except BaseException:
                self._acks.pop(post_id, None)
                raise
            try:
                with self._send_lock:
                    self.conn.send(("post", (kind, post_id, payload, self._side.name, descs)))
            except (OSError, ValueError) as error:
                self._acks.pop(post_id, None)
                raise ChannelClosed(str(error)) from error
            # NOTE: the region stays ours until the peer's reader has copied the tensors out.
            acked.wait()  # set by the ack, or by the reader when the peer goes away
            self._acks.pop(post_id, None)
        if self.closed:
            raise ChannelClosed("the peer went away")

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the reader to see the peer close the connection."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def close(self) -> None:
        """Release the side region and the peer's mapping (after the reader has stopped)."""
        self._closed()
        with self._side_lock:
            self._side.close()
        self._peer.close()

    def _read(self) -> None:
        try:
            while True:
                kind, payload = self.conn.recv()
                if kind == "ack":
                    event = self._acks.get(payload)
                    if event is not None:
                        event.set()
                elif kind == "post":
                    self._received_post(payload)
                else:
                    self._dispatch(kind, payload, {})
        except (EOFError, OSError):
            pass
        finally:
            self._closed()
            self._on_close()

    def _received_post(self, message: tuple[str, int, Any, str, list[shm.TensorDesc]]) -> None:
        kind, post_id, payload, region, descs = message
        try:
            tensors: Tensors | None = self._peer.read(region, descs)
        except Exception:  # the poster still gets its ack; the message is lost, not the channel
            logger.exception("reading the tensors of a '%s' message failed", kind)
            tensors = None
        try:
            self.send("ack", post_id)
        except ChannelClosed:
            return
        if tensors is not None:
            self._dispatch(kind, payload, tensors)

    def _dispatch(self, kind: str, payload: Any, tensors: Tensors) -> None:
        try:
            self._handle(kind, payload, tensors)
        except Exception:  # a bad message must not stop the reader (it would look like a crash)
            logger.exception("handling a '%s' message failed", kind)

    def _closed(self) -> None:
        self.closed = True
        for event in list(self._acks.values()):
            event.set()
