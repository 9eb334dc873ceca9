"""Running a batch on an instance: the one thread hop, its timing and the statistics it records.

Every scheduler sends blocking ``execute_checked`` calls through ``BatchExecutor.run`` or
``run_chain``; nothing else in the schedulers touches threads. The pool has one thread per
instance, because an instance executes one batch at a time and more threads would only queue
behind it. Cheap runs skip the hop and run on the loop (``serving.schedulers.inline``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from serving.backends.base import ExecuteResult, ModelInstance
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest, InferResponse
from serving.errors import InternalError, ServingError
from serving.schedulers.inline import DEFAULT_BUDGET_US, InlineEstimate

logger = logging.getLogger("serving.schedulers")


# NOTE: not frozen: one is made per execution, and a frozen dataclass's __init__ (one
# object.__setattr__ per field) costs four times a plain one's.
@dataclasses.dataclass(slots=True)
class BatchTiming:
    """Phases of one execution in nanoseconds.

    The backend contract is one opaque ``execute`` call, so the phases are measured around it:
    ``compute_input`` is the hand-off until the thread starts, ``compute_infer`` the call itself and
    ``compute_output`` the hand-back to the event loop (both about zero for a run on the loop).
    """

    start_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int


@dataclasses.dataclass(slots=True)
class ChainedBatch:
    """One batch of a chain (``BatchExecutor.run_chain``): what runs, and what the scheduler needs
    back with its results. ``start_ns`` is when it left the queue; ``batch`` is the scheduler's own
    handle on its requests (its ``Pending`` list), handed back untouched."""

    requests: list[InferRequest]
    batch_size: int
    release_reason: str
    start_ns: int
    batch: Any


# What one execution on the thread gives back: the results or the whole batch's exception, and
# when the call began and ended.
_Outcome = tuple[list[ExecuteResult] | Exception, int, int]
Deliver = Callable[[ChainedBatch, list[ExecuteResult], BatchTiming], None]


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
        self,
        *,
        model_name: str,
        max_batch_size: int,
        instance_count: int,
        statistics: ModelStatistics,
        inline_budget_us: int = DEFAULT_BUDGET_US,
    ) -> None:
        self.model_name = model_name
        self.max_batch_size = max_batch_size
        self.statistics = statistics
        self._inline = InlineEstimate(budget_us=inline_budget_us)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, instance_count), thread_name_prefix=f"exec-{model_name}"
        )

    def runs_inline(self, instance: ModelInstance, requests: Sequence[InferRequest]) -> bool:
        """Whether this batch would run on the loop itself (``serving.schedulers.inline``)."""
        return instance.can_run_inline() and self._inline.should_inline(requests)

    async def run(
        self,
        instance: ModelInstance,
        requests: Sequence[InferRequest],
        *,
        batch_size: int,
        release_reason: str = "",
        padding: frozenset[int] = frozenset(),
    ) -> tuple[list[ExecuteResult], BatchTiming]:
        """Execute one batch (off the loop unless it is cheap); a whole-batch exception becomes
        every request's error.

        ``padding``: positions of filler requests (sequence batcher), not counted as inferences.
        """
        if self.runs_inline(instance, requests):
            return self.run_inline(
                instance,
                requests,
                batch_size=batch_size,
                release_reason=release_reason,
                padding=padding,
            )
        start = time.monotonic_ns()
        loop = asyncio.get_running_loop()
        try:
            outcome = await loop.run_in_executor(self._pool, _timed_execute, instance, requests)
        except Exception as exc:  # noqa: BLE001 - fanned out to every request of the batch
            return self._failed(exc, start, len(requests))
        return self._record(requests, start, outcome, batch_size, release_reason, padding)

    def run_inline(
        self,
        instance: ModelInstance,
        requests: Sequence[InferRequest],
        *,
        batch_size: int,
        release_reason: str = "",
        padding: frozenset[int] = frozenset(),
    ) -> tuple[list[ExecuteResult], BatchTiming]:
        """``run`` on the calling (loop) thread, for requests ``runs_inline`` accepted."""
        start = time.monotonic_ns()
        try:
            # NOTE: ``_timed_execute``'s work without its call: this is the cheap runs' path.
            results = instance.execute_checked(requests)
            outcome = results, start, time.monotonic_ns()
        except Exception as exc:  # noqa: BLE001 - fanned out to every request of the batch
            return self._failed(exc, start, len(requests))
        return self._record(requests, start, outcome, batch_size, release_reason, padding)

    async def run_chain(
        self,
        instance: ModelInstance,
        first: ChainedBatch,
        *,
        take_next: Callable[[], ChainedBatch | None],
        deliver: Deliver,
    ) -> None:
        """Run ``first`` on the instance's thread and, on that same thread, every batch
        ``take_next`` hands over the moment the one before it ends; return when it hands none.

        This is Triton's dynamic batcher keeping the next batch ready for a busy instance: the
        next batch starts without a round trip through the event loop, which under load costs
        the instance a wait for the loop and for the GIL on the way back and again on the way
        out. ``take_next`` runs on the executor thread, so it must be thread-safe; it is asked
        after each batch and ends the chain by returning None. Each batch's results go to
        ``deliver`` on the loop as soon as that batch ends, not when the chain does.
        """
        loop = asyncio.get_running_loop()

        def post(batch: ChainedBatch, outcome: _Outcome) -> None:
            try:
                loop.call_soon_threadsafe(self._delivered, batch, outcome, deliver)
            except RuntimeError:  # the loop closed under a thread left running by a stop
                logger.warning("model '%s': a batch ended after the loop closed", self.model_name)

        await loop.run_in_executor(self._pool, _execute_chain, instance, first, take_next, post)

    def _delivered(self, batch: ChainedBatch, outcome: _Outcome, deliver: Deliver) -> None:
        """On the loop: time and count one batch of a chain, then hand its results over."""
        results, began, ended = outcome
        if isinstance(results, Exception):
            failed, timing = self._failed(results, batch.start_ns, len(batch.requests))
            timing.compute_input_ns = began - batch.start_ns
            timing.compute_infer_ns = ended - began
            deliver(batch, failed, timing)
            return
        recorded, timing = self._record(
            batch.requests,
            batch.start_ns,
            (results, began, ended),
            batch.batch_size,
            batch.release_reason,
            frozenset(),
        )
        deliver(batch, recorded, timing)

    def _failed(
        self, exc: Exception, start: int, count: int
    ) -> tuple[list[ExecuteResult], BatchTiming]:
        error = as_serving_error(exc, model_name=self.model_name)
        return [error] * count, BatchTiming(start, 0, time.monotonic_ns() - start, 0)

    def _record(
        self,
        requests: Sequence[InferRequest],
        start: int,
        outcome: tuple[list[ExecuteResult], int, int],
        batch_size: int,
        release_reason: str,
        padding: frozenset[int],
    ) -> tuple[list[ExecuteResult], BatchTiming]:
        """Time and count one finished execution; ``outcome`` is ``_timed_execute``'s."""
        results, began, ended = outcome
        timing = BatchTiming(start, began - start, ended - began, time.monotonic_ns() - ended)
        self._inline.observe(timing.compute_infer_ns)
        if len(requests) == 1 and not padding:  # the common case, kept short
            # NOTE: a lone request without padding is the whole batch: its size is batch_size.
            succeeded = batch_size if isinstance(results[0], InferResponse) else 0
        else:
            succeeded = sum(
                r.batch_size(self.max_batch_size)
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

    def shutdown(self) -> None:
        # NOTE: a thread stuck in a backend cannot be interrupted; it is left to finish on its own.
        self._pool.shutdown(wait=False, cancel_futures=True)


def _execute_chain(
    instance: ModelInstance,
    batch: ChainedBatch | None,
    take_next: Callable[[], ChainedBatch | None],
    post: Callable[[ChainedBatch, _Outcome], None],
) -> None:
    """The executor thread's side of ``BatchExecutor.run_chain``."""
    while batch is not None:
        began = time.monotonic_ns()
        try:
            results: list[ExecuteResult] | Exception = instance.execute_checked(batch.requests)
        except Exception as exc:  # noqa: BLE001 - fanned out to every request of the batch
            results = exc
        post(batch, (results, began, time.monotonic_ns()))
        batch = take_next()
