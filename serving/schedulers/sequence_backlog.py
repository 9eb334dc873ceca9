"""The sequence batcher's backlog: sequences waiting for a free slot, bounded and timed.

Triton keeps this FIFO unbounded and only expires a backlogged sequence when one of its requests
carries a ``timeout``. Here the backlog also holds at most ``sequence_backlog_size`` sequences
(model config parameter; default 16 per slot, 0 for no bound) and a sequence waits in it at most
``sequence_backlog_timeout_us`` (default 60 s, 0 for no limit), so strangers who start sequences
and walk away cannot grow it without end. A request's own ``timeout`` can only shorten the wait.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from tritonclient.grpc import model_config_pb2

from serving.backends.registry import int_parameter
from serving.errors import UnavailableError

SIZE_PARAMETER = "sequence_backlog_size"
TIMEOUT_PARAMETER = "sequence_backlog_timeout_us"
BACKLOG_PER_SLOT = 16
DEFAULT_TIMEOUT_US = 60_000_000
# Triton's answer to a request whose backlogged sequence expired (UNAVAILABLE, REJECTED).
EXPIRED_MESSAGE = "timeout of the corresponding sequence has been expired"

T = TypeVar("T")


class SequenceBacklog(Generic[T]):
    """A FIFO of waiting sequences; each leaves by getting a slot, being dropped or expiring."""

    def __init__(
        self,
        config: model_config_pb2.ModelConfig,
        *,
        slot_count: int,
        on_expired: Callable[[T], None],
    ) -> None:
        size = int_parameter(config, SIZE_PARAMETER)
        timeout_us = int_parameter(config, TIMEOUT_PARAMETER)
        self.max_size = BACKLOG_PER_SLOT * slot_count if size is None else max(0, size)
        self.timeout_us = DEFAULT_TIMEOUT_US if timeout_us is None else max(0, timeout_us)
        self._model = config.name
        self._on_expired = on_expired
        self._waiting: deque[T] = deque()
        self._deadlines: dict[T, float] = {}
        self._timers: dict[T, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def admit(self, item: T, *, corrid: int | str, request_timeout_us: int) -> None:
        """Queue a new sequence, or refuse it with UNAVAILABLE when the backlog is full."""
        if self.max_size and len(self._waiting) >= self.max_size:
            raise UnavailableError(
                f"inference request for sequence {corrid} to model '{self._model}' was refused: "
                f"the sequence backlog is full ({self.max_size} sequences wait for a slot)"
            )
        self._waiting.append(item)
        if self.timeout_us:
            self._set_deadline(item, self.timeout_us)
        if request_timeout_us:
            self._set_deadline(item, request_timeout_us)

    def tighten(self, item: T, *, request_timeout_us: int) -> None:
        """A later request of a waiting sequence: its ``timeout`` may bring the deadline closer."""
        if request_timeout_us:
            self._set_deadline(item, request_timeout_us)

    def pop(self) -> T | None:
        """The oldest waiting sequence (its deadline cancelled), or None."""
        if not self._waiting:
            return None
        item = self._waiting.popleft()
        self._forget(item)
        return item

    def discard(self, item: T) -> None:
        """Take a sequence out (it was cancelled); a no-op when it is not waiting."""
        try:
            self._waiting.remove(item)
        except ValueError:
            return
        self._forget(item)

    def clear(self) -> None:
        for item in list(self._waiting):
            self._forget(item)
        self._waiting.clear()

    def _set_deadline(self, item: T, timeout_us: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_us / 1e6
        if item in self._deadlines and self._deadlines[item] <= deadline:
            return
        self._deadlines[item] = deadline
        timer = self._timers.pop(item, None)
        if timer is not None:
            timer.cancel()
        self._timers[item] = loop.call_at(deadline, self._expire, item)

    def _expire(self, item: T) -> None:
        self._timers.pop(item, None)
        self.discard(item)
        self._on_expired(item)

    def _forget(self, item: T) -> None:
        self._deadlines.pop(item, None)
        timer = self._timers.pop(item, None)
        if timer is not None:
            timer.cancel()
