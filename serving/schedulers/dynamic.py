"""The dynamic batcher (PROTOCOL.md §5.1): batches formed at the queue head for idle instances.

An idle instance's worker takes the forming lock and walks the priority queue from the head,
accumulating whole requests. It sends the largest preferred size it can reach, or what is there
once the batch cannot grow or the oldest request has waited ``max_queue_delay_microseconds``;
otherwise it waits for an arrival or the delay. Every batch records why it was released.

A busy instance's next batch is formed on its own executor thread the moment its batch ends
(``BatchExecutor.run_chain``), by the same rules, so under load the instance does not idle
through a round trip to the event loop between batches. The queue is therefore shared with that
thread: every look at it or change to it holds ``_queue_lock``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Hashable, Sequence

from serving.backends.base import ExecuteResult, ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest
from serving.errors import UnavailableError
from serving.schedulers.execution import BatchTiming, ChainedBatch
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
        # NOTE: a threading lock, not an asyncio one: the executor threads take batches too.
        self._queue_lock = threading.Lock()
        self._chaining = False  # executor threads may take batches (until stop's drain ends)
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
        self._chaining = True
        await super().start()

    def _drain_ended(self) -> None:
        # Taken under the lock: a thread inside ``_take_ready`` finishes before this returns, and
        # none starts after, so what stop() answers next is final.
        with self._queue_lock:
            self._chaining = False

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    # -- queue ------------------------------------------------------------------------------

    def _enqueue(self, pending: Pending) -> None:
        with self._queue_lock:
            timeout_us = self._queue.push(pending)
        if timeout_us:
            pending.deadline_ns = pending.enqueue_ns + timeout_us * 1000
            loop = asyncio.get_running_loop()
            pending.timer = loop.call_later(timeout_us / 1e6, self._expire, pending)

    def _expire(self, pending: Pending) -> None:
        pending.timer = None
        with self._queue_lock:
            if not pending.queued:  # an executor thread took it as the timer fired
                return
            rejected = self._queue.expire(pending)
            if rejected:
                pending.queued = False
        if rejected:
            self._update_pending_count()
            self._finish(pending, UnavailableError(TIMEOUT_MESSAGE), reason="REJECTED")
        self._wake()

    def _remove(self, pending: Pending) -> bool:
        with self._queue_lock:
            return self._queue.remove(pending)

    def _drain_queue(self) -> list[Pending]:
        with self._queue_lock:
            return self._queue.drain()

    # -- batch formation --------------------------------------------------------------------

    async def _next_batch(self, index: int) -> tuple[list[Pending], str]:
        assert self._form_lock is not None and self._wakeup is not None
        async with self._form_lock:
            while True:
                self._wakeup.clear()
                with self._queue_lock:
                    batch, reason, wait_s = self._take(time.monotonic_ns())
                if batch:
                    return batch, reason
                await wait_until_set(self._wakeup, wait_s)

    # -- running batches back to back -------------------------------------------------------

    async def _execute(self, instance: ModelInstance, batch: list[Pending], reason: str) -> None:
        requests = [pending.request for pending in batch]
        if self._executor.runs_inline(instance, requests):
            await super()._execute(instance, batch, reason)
            return
        first = self._chained(batch, requests, reason, time.monotonic_ns())
        # NOTE: kept in ``_executing`` if this worker is cancelled mid-chain: stop() answers them.
        self._executing.update(batch)
        await self._executor.run_chain(
            instance, first, take_next=self._take_ready, deliver=self._deliver_chained
        )

    def _chained(
        self, batch: list[Pending], requests: list[InferRequest], reason: str, start_ns: int
    ) -> ChainedBatch:
        size = sum(pending.batch_size for pending in batch)
        return ChainedBatch(requests, size, reason, start_ns, batch)

    def _take_ready(self) -> ChainedBatch | None:
        """On an executor thread whose batch just ended: the batch the queue would release now,
        taken out of it, or None (nothing queued, or it must wait for more or for its delay;
        the worker's own wait on the loop handles that)."""
        with self._queue_lock:
            if not self._chaining:
                return None
            now_ns = time.monotonic_ns()
            batch, reason, _ = self._take(now_ns)
            if not batch:
                return None
            # NOTE: one set operation, atomic under the GIL; stop() reads the set only after
            # ``_drain_ended`` has closed this path.
            self._executing.update(batch)
            self._update_pending_count()  # one attribute written: safe from this thread
        return self._chained(batch, [pending.request for pending in batch], reason, now_ns)

    def _deliver_chained(
        self, chained: ChainedBatch, results: list[ExecuteResult], timing: BatchTiming
    ) -> None:
        """On the loop, for each batch of a chain as it ends (``BatchExecutor.run_chain``)."""
        batch: list[Pending] = chained.batch
        self._executing.difference_update(batch)
        if not self._chaining:  # past stop's drain: stop() may have answered some already
            kept = [i for i, pending in enumerate(batch) if pending.outcome is None]
            batch, results = [batch[i] for i in kept], [results[i] for i in kept]
        try:
            self._deliver(batch, results, timing)
        except Exception as exc:  # noqa: BLE001 - as in the worker: answer, never leave hanging
            self._scheduling_failed(batch, exc, "a batch's results could not be delivered")

    def _take(self, now_ns: int) -> tuple[list[Pending], str, float | None]:
        """``_form``, with the batch taken out of the queue; the caller holds ``_queue_lock``."""
        batch, reason, wait_s = self._form(now_ns)
        for pending in batch:
            self._queue.remove(pending)
            pending.queued = False
        return batch, reason, wait_s

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
