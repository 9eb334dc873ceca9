"""The default scheduler (no batching config): FIFO per model, one request per free instance."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from serving.backends.base import ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest, InferResponse
from serving.errors import UnavailableError
from serving.schedulers.pending import Pending
from serving.schedulers.queue_bounds import QUEUE_FULL_MESSAGE, default_max_queue_size
from serving.schedulers.queued import QueuedScheduler


class DefaultScheduler(QueuedScheduler):
    """Every instance takes the oldest queued request when it frees up (PROTOCOL.md §5.5).

    ``priority`` and ``timeout`` have no effect here, as in Triton. A cheap request that finds the
    queue empty and an instance idle runs at once, without the queue (``_run_now``). The queue
    holds at most ``default_max_queue_size(max_batch_size)`` requests (unbounded in Triton).
    """

    def __init__(
        self,
        *,
        spec: ModelSpec,
        instances: Sequence[ModelInstance],
        statistics: ModelStatistics,
    ) -> None:
        super().__init__(spec=spec, instances=instances, statistics=statistics)
        self._queue: deque[Pending] = deque()
        self.max_queue_size = default_max_queue_size(self.max_batch_size)

    async def infer(self, request: InferRequest) -> InferResponse:
        if not self._queue:  # ``_run_now`` only for a request nothing queued is ahead of
            response = self._run_now(request)
            if response is not None:
                return response
        return await super().infer(request)

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def _enqueue(self, pending: Pending) -> None:
        if len(self._queue) >= self.max_queue_size:
            raise UnavailableError(QUEUE_FULL_MESSAGE)
        self._queue.append(pending)

    def _remove(self, pending: Pending) -> bool:
        try:
            self._queue.remove(pending)
        except ValueError:
            return False
        return True

    def _drain_queue(self) -> list[Pending]:
        drained = list(self._queue)
        self._queue.clear()
        return drained

    async def _next_batch(self, index: int) -> tuple[list[Pending], str]:
        assert self._wakeup is not None
        while not self._queue:
            self._wakeup.clear()
            await self._wakeup.wait()
        return [self._queue.popleft()], ""
