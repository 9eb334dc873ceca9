"""Running a batch on an instance: the one thread hop, its timing and the statistics it records.

Every scheduler sends blocking ``execute_checked`` calls through ``BatchExecutor.run``; nothing
else in the schedulers touches threads. The pool has one thread per instance, because an instance
executes one batch at a time and more threads would only queue behind it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from serving.backends.base import ExecuteResult, ModelInstance
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest, InferResponse
from serving.errors import InternalError, ServingError


@dataclasses.dataclass(frozen=True, slots=True)
class BatchTiming:
    """Phases of one execution in nanoseconds.

    The backend contract is one opaque ``execute`` call, so the phases are measured around it:
    ``compute_input`` is the hand-off until the thread starts, ``compute_infer`` the call itself and
    ``compute_output`` the hand-back to the event loop.
    """

    start_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int


def _timed_execute(
    instance: ModelInstance, requests: Sequence[InferRequest]
) -> tuple[list[ExecuteResult], int, int]:
    began = time.monotonic_ns()
    results = instance.execute_checked(requests)
    return results, began, time.monotonic_ns()


def as_serving_error(exc: BaseException, *, model_name: str) -> ServingError:
    """A whole-batch failure as the error every request of the batch receives."""
    if isinstance(exc, ServingError):
        return exc
    return InternalError(f"model '{model_name}' failed to execute: {type(exc).__name__}: {exc}")


class BatchExecutor:
    """A thread pool sized to the instances, and the helper that times and records one execution."""

    def __init__(
        self, *, model_name: str, instance_count: int, statistics: ModelStatistics
    ) -> None:
        self.model_name = model_name
        self.statistics = statistics
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, instance_count), thread_name_prefix=f"exec-{model_name}"
        )

    async def run(
        self,
        instance: ModelInstance,
        requests: Sequence[InferRequest],
        *,
        batch_size: int,
        release_reason: str = "",
        padding: frozenset[int] = frozenset(),
    ) -> tuple[list[ExecuteResult], BatchTiming]:
        """Execute one batch off the loop; a whole-batch exception becomes every request's error.

        ``padding``: positions of filler requests (sequence batcher), not counted as inferences.
        """
        start = time.monotonic_ns()
        loop = asyncio.get_running_loop()
        try:
            results, began, ended = await loop.run_in_executor(
                self._pool, _timed_execute, instance, requests
            )
        except Exception as exc:  # noqa: BLE001 - fanned out to every request of the batch
            error = as_serving_error(exc, model_name=self.model_name)
            now = time.monotonic_ns()
            return [error] * len(requests), BatchTiming(start, 0, now - start, 0)
        done = time.monotonic_ns()
        timing = BatchTiming(start, began - start, ended - began, done - ended)
        max_batch_size = self._max_batch_size(instance)
        succeeded = sum(
            r.batch_size(max_batch_size)
            for position, (r, res) in enumerate(zip(requests, results, strict=True))
            if isinstance(res, InferResponse) and position not in padding
        )
        self.statistics.record_execution(
            batch_size=batch_size,
            compute_input_ns=timing.compute_input_ns,
            compute_infer_ns=timing.compute_infer_ns,
            compute_output_ns=timing.compute_output_ns,
            release_reason=release_reason,
            inference_count=succeeded,
        )
        return results, timing

    @staticmethod
    def _max_batch_size(instance: ModelInstance) -> int:
        return int(instance.spec.config.max_batch_size)

    def shutdown(self) -> None:
        # NOTE: a thread stuck in a backend cannot be interrupted; it is left to finish on its own.
        self._pool.shutdown(wait=False, cancel_futures=True)
