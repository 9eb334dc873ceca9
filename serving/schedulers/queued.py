"""The shared machinery of schedulers that queue requests for a pool of instances.

Subclasses decide admission (``_enqueue``) and batch formation (``_next_batch``); this class owns
the workers (one asyncio task per instance, all pulling from the subclass's queue), the thread hop,
delivery of results, cancellation, statistics and the drain on stop.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence

from serving.backends.base import ExecuteResult, ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest, InferResponse
from serving.errors import InternalError, ServingError, UnavailableError
from serving.schedulers.base import Scheduler
from serving.schedulers.execution import BatchExecutor, BatchTiming
from serving.schedulers.inline import configured_budget_us
from serving.schedulers.pending import Pending

logger = logging.getLogger("serving.schedulers")

STOPPING_MESSAGE = (
    "Server is stopping, scheduler for model has stopped accepting new inference requests"
)


async def wait_until_set(event: asyncio.Event, timeout_s: float | None) -> None:
    """Wait for ``event`` at most ``timeout_s`` (None: no limit); a timeout is not an error.

    ``asyncio.timeout`` rather than ``wait_for``: no task per wait on the batching hot path.
    """
    if timeout_s is None:
        await event.wait()
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()


class QueuedScheduler(Scheduler, abc.ABC):
    """Workers, delivery and draining for schedulers that feed instances from a queue."""

    def __init__(
        self,
        *,
        spec: ModelSpec,
        instances: Sequence[ModelInstance],
        statistics: ModelStatistics,
        preserve_ordering: bool = False,
    ) -> None:
        self.spec = spec
        self.instances = list(instances)
        self.statistics = statistics
        self.max_batch_size = int(spec.config.max_batch_size)
        self._preserve_ordering = preserve_ordering
        self._executor = BatchExecutor(
            model_name=spec.name,
            max_batch_size=self.max_batch_size,
            instance_count=len(self.instances),
            statistics=statistics,
            inline_budget_us=configured_budget_us(spec.config),
        )
        self._workers: list[asyncio.Task[None]] = []
        self._accepting = False
        self._in_flight = 0
        self._ordered: deque[Pending] = deque()
        self._executing: set[Pending] = set()
        self._busy = [False] * len(self.instances)  # instance index -> executing a batch now
        # Made by stop() when requests are in flight; answered when the last one finishes.
        # NOTE: not an Event kept current: that cost a clear and a set on every request.
        self._drained: asyncio.Future[None] | None = None
        self._wakeup: asyncio.Event | None = None

    # -- the Scheduler contract -------------------------------------------------------------

    async def start(self) -> None:
        # NOTE: events are made here, inside the running loop that will use them.
        self._wakeup = asyncio.Event()
        self._accepting = True
        for index, instance in enumerate(self.instances):
            name = f"{self.spec.name}-v{self.spec.version}-worker-{index}"
            task = asyncio.create_task(self._worker(index, instance), name=name)
            self._workers.append(task)

    async def infer(self, request: InferRequest) -> InferResponse:
        if not self._accepting:
            raise UnavailableError(STOPPING_MESSAGE)
        pending = self._admit(request)
        try:
            return await pending.future
        except asyncio.CancelledError:
            self._cancelled(pending)
            raise

    async def stop(self, *, drain_timeout_s: float) -> None:
        self._accepting = False
        if self._in_flight:
            self._drained = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained, timeout=drain_timeout_s)
        self._drain_ended()
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        # Past the drain timeout: what is still queued or stuck executing is answered, not dropped.
        for pending in [*self._drain_queue(), *self._executing]:
            self._finish(pending, UnavailableError(STOPPING_MESSAGE), reason="OTHER")
        self._executing.clear()
        self._update_pending_count()  # the queue is empty now: the gauge must not keep its depth
        self._executor.shutdown()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    # -- what subclasses provide ------------------------------------------------------------

    def _drain_ended(self) -> None:
        """Stop's drain is over: from here nothing may start a batch off the loop."""

    @abc.abstractmethod
    def _enqueue(self, pending: Pending) -> None:
        """Put an admitted request in the queue, or raise a ServingError to refuse it."""

    @abc.abstractmethod
    def _remove(self, pending: Pending) -> bool:
        """Take a still-queued request out of the queue; False when it is no longer queued."""

    @abc.abstractmethod
    def _drain_queue(self) -> list[Pending]:
        """Empty the queue, returning what was in it."""

    @abc.abstractmethod
    async def _next_batch(self, index: int) -> tuple[list[Pending], str]:
        """Wait for instance ``index``'s next batch; return it and why it was released.

        The reason is "" when the scheduler does not batch.
        """

    # -- admission, delivery, cancellation --------------------------------------------------

    def _admit(self, request: InferRequest) -> Pending:
        loop = asyncio.get_running_loop()
        pending = Pending(
            request=request,
            future=loop.create_future(),
            enqueue_ns=time.monotonic_ns(),
            batch_size=request.batch_size(self.max_batch_size),
        )
        try:
            self._enqueue(pending)
        except ServingError as exc:
            # Refused before queueing (queue full, bad sequence id): counted, nothing to undo.
            reason = "REJECTED" if isinstance(exc, UnavailableError) else "OTHER"
            total_ns = time.monotonic_ns() - request.arrival_ns
            self.statistics.record_failure(reason=reason, total_ns=total_ns)
            raise
        self._in_flight += 1
        if self._preserve_ordering:
            self._ordered.append(pending)
        assert self._wakeup is not None
        self._update_pending_count()
        self._wakeup.set()
        return pending

    def _run_now(self, request: InferRequest) -> InferResponse | None:
        """Run a request at once, on the loop, when an instance is idle and its run is cheap
        enough to stay on the loop; None when it must queue. The caller has found its queue
        empty (``queue_depth`` is a property a subclass computes: one call more to ask here).

        This skips the hand-offs to a worker task and back, which at low load cost more than a
        small model's run. Nothing can overtake: the queue is empty and the whole call is
        synchronous, so no other request runs on the loop meanwhile. For the same reason the
        request needs no ``Pending`` and no future: ``stop`` cannot run in the middle of it, and
        its outcome is known when the call returns.
        """
        if not self._accepting:
            return None
        requests = (request,)
        for index, instance in enumerate(self.instances):
            if not self._busy[index] and self._executor.runs_inline(instance, requests):
                break
        else:
            return None
        enqueue_ns = time.monotonic_ns()
        self._busy[index] = True
        try:
            results, timing = self._executor.run_inline(
                instance, requests, batch_size=request.batch_size(self.max_batch_size)
            )
        finally:
            self._busy[index] = False
        result = results[0]
        if isinstance(result, InferResponse):
            self._count_success(request, result, enqueue_ns, timing)
            return result
        total_ns = time.monotonic_ns() - request.arrival_ns
        self.statistics.record_failure(reason="BACKEND", total_ns=total_ns)
        raise result

    def _update_pending_count(self) -> None:
        self.statistics.pending_request_count = self.queue_depth

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _cancelled(self, pending: Pending) -> None:
        """The caller gave up. A queued request leaves the queue; an executing one runs on."""
        if pending.queued and self._remove(pending):
            pending.queued = False
            pending.cancel_timer()
            self._update_pending_count()
            self._finish(pending, asyncio.CancelledError(), reason="CANCELED")
            self._wake()

    def _finish(
        self, pending: Pending, outcome: InferResponse | BaseException, *, reason: str = "BACKEND"
    ) -> None:
        """Record one request's outcome and answer it (in arrival order with preserve_ordering)."""
        if pending.outcome is not None:
            return
        pending.outcome = outcome
        pending.queued = False
        pending.cancel_timer()
        total_ns = time.monotonic_ns() - pending.request.arrival_ns
        if pending.future.cancelled() or isinstance(outcome, asyncio.CancelledError):
            self.statistics.record_failure(reason="CANCELED", total_ns=total_ns)
        elif isinstance(outcome, BaseException):
            self.statistics.record_failure(reason=reason, total_ns=total_ns)
        self._in_flight -= 1
        if self._in_flight == 0 and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self._preserve_ordering:
            self._release_in_order()
        else:
            self._resolve(pending)

    def _release_in_order(self) -> None:
        while self._ordered and self._ordered[0].outcome is not None:
            self._resolve(self._ordered.popleft())

    @staticmethod
    def _resolve(pending: Pending) -> None:
        future, outcome = pending.future, pending.outcome
        if future.done() or outcome is None or isinstance(outcome, asyncio.CancelledError):
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    # -- workers ----------------------------------------------------------------------------

    async def _worker(self, index: int, instance: ModelInstance) -> None:
        while True:
            batch, reason = await self._next_batch(index)
            if not batch:
                continue
            for pending in batch:
                pending.queued = False
                pending.cancel_timer()
            self._update_pending_count()
            self._busy[index] = True
            try:
                await self._execute(instance, batch, reason)
            except Exception as exc:  # noqa: BLE001 - a scheduler bug must not kill the worker
                self._executing.difference_update(batch)
                self._scheduling_failed(batch, exc, "a batch could not be scheduled")
            finally:
                self._busy[index] = False

    def _scheduling_failed(self, batch: list[Pending], exc: Exception, what: str) -> None:
        """A bug between queue and answer: the batch's requests get INTERNAL, never a hang."""
        logger.exception("model '%s': %s", self.spec.name, what)
        error = InternalError(f"model '{self.spec.name}': scheduling failed: {exc}")
        self._batch_abandoned(batch, error)
        for pending in batch:
            self._finish(pending, error, reason="OTHER")

    def _batch_abandoned(self, batch: list[Pending], error: InternalError) -> None:
        """A batch taken from the queue will not run; subclasses release what it held."""

    async def _execute(self, instance: ModelInstance, batch: list[Pending], reason: str) -> None:
        requests = [pending.request for pending in batch]
        results, timing = await self._run(instance, batch, requests, reason=reason)
        self._deliver(batch, results, timing)

    async def _run(
        self,
        instance: ModelInstance,
        batch: list[Pending],
        requests: list[InferRequest],
        *,
        reason: str,
        padding: frozenset[int] = frozenset(),
    ) -> tuple[list[ExecuteResult], BatchTiming]:
        # NOTE: kept in ``_executing`` if this worker is cancelled mid-batch: stop() answers them.
        self._executing.update(batch)
        results, timing = await self._executor.run(
            instance,
            requests,
            batch_size=sum(pending.batch_size for pending in batch) + len(padding),
            release_reason=reason,
            padding=padding,
        )
        self._executing.difference_update(batch)
        return results, timing

    def _deliver(
        self, batch: list[Pending], results: list[ExecuteResult], timing: BatchTiming
    ) -> None:
        for pending, result in zip(batch, results, strict=True):
            if isinstance(result, InferResponse) and not pending.future.cancelled():
                self._count_success(pending.request, result, pending.enqueue_ns, timing)
            self._finish(pending, result, reason="BACKEND")

    def _count_success(
        self, request: InferRequest, response: InferResponse, enqueue_ns: int, timing: BatchTiming
    ) -> None:
        if not response.id:
            response.id = request.id
        self.statistics.record_success(
            total_ns=time.monotonic_ns() - request.arrival_ns,
            queue_ns=timing.start_ns - enqueue_ns,
            compute_input_ns=timing.compute_input_ns,
            compute_infer_ns=timing.compute_infer_ns,
            compute_output_ns=timing.compute_output_ns,
        )
