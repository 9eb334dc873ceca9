"""The dynamic batcher (PROTOCOL.md §5.1): batches formed at the queue head for idle instances.

An idle instance's worker takes the forming lock and walks the priority queue from the head,
accumulating whole requests. It sends the largest preferred size it can reach, or what is there
once the batch cannot grow or the oldest request has waited ``max_queue_delay_microseconds``;
otherwise it waits for an arrival or the delay. Every batch records why it was released.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Hashable, Sequence

from serving.backends.base import ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest
from serving.errors import UnavailableError
from serving.schedulers.pending import Pending
from serving.schedulers.priority_queue import TIMEOUT_MESSAGE, PriorityQueue
from serving.schedulers.queued import QueuedScheduler, wait_until_set

# Why a batch left the queue (the release-reason counter's label values).
PREFERRED_SIZE = "preferred_size"  # the batch reached a preferred batch size
MAX_BATCH = "max_batch"  # it could not grow past max_batch_size or the largest preferred size
QUEUE_DELAY = "queue_delay"  # the oldest request waited max_queue_delay_microseconds
INSTANCE_IDLE = (
    "instance_idle"  # no delay configured: an instance was free, so what was queued went
)
INCOMPATIBLE = "incompatible"  # the next request's shapes (or optional inputs) did not match
RELEASE_REASONS = (PREFERRED_SIZE, MAX_BATCH, QUEUE_DELAY, INSTANCE_IDLE, INCOMPATIBLE)


@dataclasses.dataclass(slots=True)
class _Walk:
    """The queue-head walk: the candidate batch and the cut points found on the way."""

    batch: list[Pending] = dataclasses.field(default_factory=list)
    total: int = 0
    preferred_cut: int = 0
    preferred_total: int = 0
    saturated_cut: int = 0
    stop_reason: str = ""


class DynamicBatcher(QueuedScheduler):
    """Batches queued requests per ``dynamic_batching``, instances pulling from one queue."""

    def __init__(
        self,
        *,
        spec: ModelSpec,
        instances: Sequence[ModelInstance],
        statistics: ModelStatistics,
    ) -> None:
        batching = spec.config.dynamic_batching
        super().__init__(
            spec=spec,
            instances=instances,
            statistics=statistics,
            preserve_ordering=bool(batching.preserve_ordering),
        )
        self._queue = PriorityQueue(batching, max_batch_size=self.max_batch_size)
        self._max = max(1, self.max_batch_size)
        preferred = {int(p) for p in batching.preferred_batch_size if 0 < p <= self._max}
        self._preferred = preferred or {self._max}
        self._largest_preferred = max(self._preferred)
        self._delay_ns = int(batching.max_queue_delay_microseconds) * 1000
        self._form_lock: asyncio.Lock | None = None
        inputs = spec.config.input
        # Inputs whose shapes must agree inside a batch: variable dims not declared ragged.
        self._shape_inputs = tuple(
            i.name
            for i in inputs
            if (any(d < 0 for d in i.dims) and not i.allow_ragged_batch) or i.is_shape_tensor
        )
        self._value_inputs = frozenset(i.name for i in inputs if i.is_shape_tensor)
        self._has_optional = any(i.optional for i in inputs)

    async def start(self) -> None:
        self._form_lock = asyncio.Lock()
        await super().start()

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    # -- queue ------------------------------------------------------------------------------

    def _enqueue(self, pending: Pending) -> None:
        timeout_us = self._queue.push(pending)
        if timeout_us:
            pending.deadline_ns = pending.enqueue_ns + timeout_us * 1000
            loop = asyncio.get_running_loop()
            pending.timer = loop.call_later(timeout_us / 1e6, self._expire, pending)

    def _expire(self, pending: Pending) -> None:
        pending.timer = None
        if not pending.queued:
            return
        if self._queue.expire(pending):
            pending.queued = False
            self._update_pending_count()
            self._finish(pending, UnavailableError(TIMEOUT_MESSAGE), reason="REJECTED")
        self._wake()

    def _remove(self, pending: Pending) -> bool:
        return self._queue.remove(pending)

    def _drain_queue(self) -> list[Pending]:
        return self._queue.drain()

    # -- batch formation --------------------------------------------------------------------

    async def _next_batch(self, index: int) -> tuple[list[Pending], str]:
        assert self._form_lock is not None and self._wakeup is not None
        async with self._form_lock:
            while True:
                self._wakeup.clear()
                batch, reason, wait_s = self._form(time.monotonic_ns())
                if batch:
                    for pending in batch:
                        self._queue.remove(pending)
                    return batch, reason
                await wait_until_set(self._wakeup, wait_s)

    def _form(self, now_ns: int) -> tuple[list[Pending], str, float | None]:
        """The batch to send now and why, or nothing and how long to wait (None: until woken)."""
        walk = self._walk()
        if not walk.batch:
            return [], "", None
        waited_ns = now_ns - min(p.enqueue_ns for p in walk.batch)
        expired = self._delay_ns > 0 and waited_ns >= self._delay_ns
        if not expired:
            if walk.preferred_cut:
                reason = MAX_BATCH if walk.preferred_total >= self._max else PREFERRED_SIZE
                return walk.batch[: walk.preferred_cut], reason, None
            if walk.saturated_cut:
                return walk.batch[: walk.saturated_cut], MAX_BATCH, None
            if walk.stop_reason:
                return walk.batch, walk.stop_reason, None
            if self._delay_ns == 0:
                return walk.batch, INSTANCE_IDLE, None
            return [], "", (self._delay_ns - waited_ns) / 1e9
        return walk.batch, QUEUE_DELAY, None

    def _walk(self) -> _Walk:
        walk = _Walk()
        signature: Hashable = None
        for pending in self._queue:
            size = pending.batch_size
            if walk.batch:
                if self._signature(pending.request) != signature:
                    walk.stop_reason = INCOMPATIBLE
                    break
                if walk.total + size > self._max:
                    walk.stop_reason = MAX_BATCH
                    break
                if not walk.saturated_cut and walk.total + size > self._largest_preferred:
                    # Past here no preferred size is reachable; kept walking only for the delay.
                    walk.saturated_cut = len(walk.batch)
            else:
                signature = self._signature(pending.request)
            walk.batch.append(pending)
            walk.total += size
            if not walk.saturated_cut and walk.total > self._largest_preferred:
                walk.saturated_cut = len(walk.batch)  # a first request already past every size
            if not walk.saturated_cut and walk.total in self._preferred:
                walk.preferred_cut, walk.preferred_total = len(walk.batch), walk.total
            if walk.total >= self._max:
                walk.stop_reason = MAX_BATCH
                break
        return walk

    def _signature(self, request: InferRequest) -> Hashable:
        """What must be equal for two requests to share a batch."""
        skip = 1 if self.max_batch_size > 0 else 0
        parts: list[object] = []
        for name in self._shape_inputs:
            array = request.inputs.get(name)
            if array is None:
                parts.append(None)
                continue
            parts.append(tuple(array.shape[skip:]))
            if name in self._value_inputs:
                parts.append(array.tobytes())
        present = frozenset(request.inputs) if self._has_optional else None
        return (tuple(parts), present)
