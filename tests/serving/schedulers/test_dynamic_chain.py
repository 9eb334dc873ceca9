"""The dynamic batcher's next batch, taken on the instance's own thread the moment a batch ends.

``BatchExecutor.run_chain`` asks the batcher for the next ready batch on the executor thread, so
a busy instance goes from batch to batch without waiting for the event loop. These tests block
the loop on purpose to show the next batch starts without it, and cover what the shared queue
must keep: the batching rules, timeouts, cancellation, statistics and stop's answers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from serving.backends.base import ExecuteResult
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest
from serving.errors import ServingError
from serving.schedulers.dynamic import QUEUE_DELAY, DynamicBatcher
from serving.schedulers.factory import create_scheduler
from tests.serving.schedulers.fakes import RecordingInstance, boom, make_spec, request
from tests.serving.schedulers.test_dynamic import config

pytestmark = pytest.mark.embedded


class Permits(threading.Semaphore):
    """A gate for ``RecordingInstance`` that lets batches through one per ``release``."""

    def wait(self, timeout: float) -> bool:
        assert self.acquire(timeout=timeout), "the test never let this batch run"
        return True


class SteppedInstance(RecordingInstance):
    """Records each batch as it starts, then runs it only once the test allows one more batch."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.permits = Permits(0)
        self.gate = self.permits  # type: ignore[assignment]
        self.threads: list[str] = []

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        self.threads.append(threading.current_thread().name)
        return super().execute(requests)


async def started(text: str, *, count: int = 1, **kw: object) -> tuple[DynamicBatcher, list]:
    spec = make_spec(text)
    instances = [SteppedInstance(spec, index=i, **kw) for i in range(count)]
    scheduler = create_scheduler(
        spec=spec, instances=instances, statistics=ModelStatistics("m", 1), server=None
    )
    assert isinstance(scheduler, DynamicBatcher)
    await scheduler.start()
    return scheduler, instances


async def until(condition, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.002)


def block_loop_until(condition, timeout_s: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    """Hold the event loop's thread (no await) until ``condition`` or the timeout; say which."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


async def holding(scheduler: DynamicBatcher, instance: SteppedInstance) -> asyncio.Task:
    """Start request "hold" and wait until it occupies the instance."""
    task = asyncio.create_task(scheduler.infer(request("hold")))
    await until(lambda: len(instance.batches) == 1)
    return task


async def queued(scheduler: DynamicBatcher, *ids: str) -> list[asyncio.Task]:
    tasks = [asyncio.create_task(scheduler.infer(request(rid))) for rid in ids]
    await until(lambda: scheduler.queue_depth == len(ids))
    return tasks


async def test_the_next_batch_starts_on_the_instance_thread_while_the_loop_is_busy() -> None:
    scheduler, [instance] = await started(config())
    held = await holding(scheduler, instance)
    tasks = await queued(scheduler, "a", "b")
    instance.permits.release()
    # The loop stays blocked here: only the executor thread can start the next batch.
    started_without_loop = block_loop_until(lambda: len(instance.batches) == 2)
    instance.permits.release()
    results = await asyncio.gather(held, *tasks)
    assert started_without_loop
    assert instance.batches == [["hold"], ["a", "b"]]
    assert instance.threads[0] == instance.threads[1]
    assert [r.id for r in results] == ["hold", "a", "b"]
    assert np.array_equal(results[1].outputs["OUT"], np.full((1, 4), 2.0, dtype=np.float32))
    await scheduler.stop(drain_timeout_s=1)


async def test_batches_taken_on_the_thread_follow_max_batch_size_and_are_counted() -> None:
    scheduler, [instance] = await started(config(max_batch=2))
    held = await holding(scheduler, instance)
    tasks = await queued(scheduler, "a", "b", "c", "d", "e")
    for _ in range(4):
        instance.permits.release()
    results = await asyncio.gather(held, *tasks)
    assert instance.batches == [["hold"], ["a", "b"], ["c", "d"], ["e"]]
    assert [r.id for r in results] == ["hold", "a", "b", "c", "d", "e"]
    statistics = scheduler.statistics
    assert statistics.execution_count == 4 and statistics.inference_count == 6
    assert statistics.success.count == 6 and statistics.queue.count == 6
    assert sorted(statistics.batch_stats) == [1, 2]
    assert statistics.batch_stats[2].compute_infer.count == 2
    assert statistics.pending_request_count == 0 and scheduler.in_flight == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_the_thread_leaves_a_batch_that_must_wait_for_its_queue_delay() -> None:
    scheduler, [instance] = await started(
        config("preferred_batch_size: [4] max_queue_delay_microseconds: 1000000")
    )
    held = await holding(scheduler, instance)
    tasks = await queued(scheduler, "a")
    instance.permits.release()
    taken_early = block_loop_until(lambda: len(instance.batches) == 2, timeout_s=0.1)
    assert not taken_early  # one request, far from 4, its delay not yet over
    instance.permits.release()
    results = await asyncio.gather(held, *tasks)
    assert [r.id for r in results] == ["hold", "a"]
    assert scheduler.statistics.batch_release_reasons[QUEUE_DELAY] == 2  # "hold", then "a"
    await scheduler.stop(drain_timeout_s=1)


async def test_a_request_taken_by_the_thread_is_not_rejected_when_its_queue_timeout_fires() -> None:
    scheduler, [instance] = await started(
        config("default_queue_policy { default_timeout_microseconds: 500000 }", max_batch=1)
    )
    held = await holding(scheduler, instance)
    tasks = await queued(scheduler, "a")
    instance.permits.release()
    await until(lambda: len(instance.batches) == 2)
    await asyncio.sleep(0.8)  # the timer fires while "a" runs
    instance.permits.release()
    results = await asyncio.gather(held, *tasks)
    assert [r.id for r in results] == ["hold", "a"]
    assert scheduler.statistics.failures_by_reason["REJECTED"] == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_cancelling_a_request_the_thread_took_leaves_its_neighbour_answered() -> None:
    scheduler, [instance] = await started(config())
    held = await holding(scheduler, instance)
    tasks = await queued(scheduler, "a", "b")
    instance.permits.release()
    await until(lambda: len(instance.batches) == 2)
    tasks[0].cancel()
    instance.permits.release()
    results = await asyncio.gather(held, *tasks, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError) and results[2].id == "b"
    assert scheduler.statistics.failures_by_reason["CANCELED"] == 1
    assert scheduler.statistics.success.count == 2 and scheduler.in_flight == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_a_failed_batch_on_the_thread_fails_only_its_own_requests() -> None:
    def fail_b(requests: Sequence[InferRequest]) -> BaseException | None:
        return boom("device lost")(requests) if requests[0].id == "b" else None

    scheduler, [instance] = await started(config(max_batch=1), fail_batch=fail_b)
    held = await holding(scheduler, instance)
    tasks = await queued(scheduler, "a", "b", "c")
    for _ in range(4):
        instance.permits.release()
    results = await asyncio.gather(held, *tasks, return_exceptions=True)
    assert instance.batches == [["hold"], ["a"], ["b"], ["c"]]
    assert [results[i].id for i in (0, 1, 3)] == ["hold", "a", "c"]
    assert isinstance(results[2], ServingError) and "device lost" in str(results[2])
    assert scheduler.statistics.failures_by_reason["BACKEND"] == 1
    assert scheduler.statistics.execution_count == 3  # a failed execution is not counted
    await scheduler.stop(drain_timeout_s=1)


async def test_a_batch_whose_delivery_fails_is_answered_internal_and_the_chain_goes_on() -> None:
    scheduler, [instance] = await started(config(max_batch=1))
    deliver = scheduler._deliver

    def deliver_but_break_on_a(batch, results, timing):  # type: ignore[no-untyped-def]
        if batch and batch[0].request.id == "a":
            raise RuntimeError("bug")
        deliver(batch, results, timing)

    scheduler._deliver = deliver_but_break_on_a  # type: ignore[method-assign]
    held = await holding(scheduler, instance)
    tasks = await queued(scheduler, "a", "b")
    for _ in range(3):
        instance.permits.release()
    # Bounded: a delivery failure left unanswered would hang here.
    results = await asyncio.wait_for(asyncio.gather(held, *tasks, return_exceptions=True), 10)
    assert instance.batches == [["hold"], ["a"], ["b"]]
    assert isinstance(results[1], ServingError)
    assert str(results[1]) == "model 'm': scheduling failed: bug"
    assert results[1].code.value == "INTERNAL"
    assert [results[0].id, results[2].id] == ["hold", "b"]
    assert scheduler.statistics.failures_by_reason["OTHER"] == 1 and scheduler.in_flight == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_stop_answers_a_stuck_batch_the_thread_took_and_runs_nothing_after_it() -> None:
    scheduler, [instance] = await started(config(max_batch=1))
    held = await holding(scheduler, instance)
    tasks = await queued(scheduler, "a", "b")
    instance.permits.release()
    await until(lambda: len(instance.batches) == 2)  # "a" is stuck on the thread
    await scheduler.stop(drain_timeout_s=0.2)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, ServingError) and "stopping" in str(r) for r in results)
    assert (await held).id == "hold"
    instance.permits.release()  # "a" ends after the stop; nothing may follow it
    await asyncio.sleep(0.1)
    assert instance.batches == [["hold"], ["a"]]
    assert scheduler.in_flight == 0
    statistics = scheduler.statistics
    assert statistics.success.count == 1  # "a" was answered by the stop, and counted so
    assert statistics.failures_by_reason["OTHER"] == 2


async def test_two_instances_taking_batches_on_their_threads_answer_every_request_once() -> None:
    spec = make_spec(config(max_batch=4))
    instances = [RecordingInstance(spec, index=i, delay_s=0.001) for i in range(2)]
    scheduler = create_scheduler(
        spec=spec, instances=instances, statistics=ModelStatistics("m", 1), server=None
    )
    await scheduler.start()
    ids = [f"r{i}" for i in range(300)]
    results = await asyncio.gather(*(scheduler.infer(request(rid)) for rid in ids))
    assert [r.id for r in results] == ids
    ran = [rid for instance in instances for batch in instance.batches for rid in batch]
    assert sorted(ran) == sorted(ids)  # each request ran once, on one instance
    assert all(len(batch) <= 4 for instance in instances for batch in instance.batches)
    assert all(instance.batches for instance in instances)
    assert scheduler.statistics.inference_count == 300 and scheduler.in_flight == 0
    await scheduler.stop(drain_timeout_s=1)
