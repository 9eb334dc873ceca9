"""The default scheduler: FIFO, one request per free instance, all instances on one queue."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from serving.errors import ErrorCode, ServingError, UnavailableError
from serving.schedulers.default import DefaultScheduler
from serving.schedulers.factory import create_scheduler
from tests.serving.schedulers.fakes import RecordingInstance, boom, make_spec, request

pytestmark = pytest.mark.embedded

CONFIG = 'name: "m" max_batch_size: 8 input { name: "IN" data_type: TYPE_FP32 dims: [4] }'


async def started(instances: list[RecordingInstance]) -> DefaultScheduler:
    from serving.core.statistics import ModelStatistics

    spec = instances[0].spec
    scheduler = create_scheduler(
        spec=spec, instances=instances, statistics=ModelStatistics("m", 1), server=None
    )
    assert isinstance(scheduler, DefaultScheduler)
    await scheduler.start()
    return scheduler


async def test_default_scheduler_runs_each_request_on_its_own_and_answers_it() -> None:
    instance = RecordingInstance(make_spec(CONFIG))
    scheduler = await started([instance])
    responses = await asyncio.gather(
        *(scheduler.infer(request(f"r{i}", value=i)) for i in range(5))
    )
    assert [r.id for r in responses] == [f"r{i}" for i in range(5)]
    assert np.array_equal(responses[3].outputs["OUT"], np.full((1, 4), 6.0, dtype=np.float32))
    assert instance.batches == [["r0"], ["r1"], ["r2"], ["r3"], ["r4"]]
    stats = scheduler.statistics.triton_dict()
    assert stats["execution_count"] == 5 and stats["inference_count"] == 5
    assert stats["inference_stats"]["success"]["count"] == 5  # type: ignore[index]
    await scheduler.stop(drain_timeout_s=1)


async def test_all_instances_pull_from_one_queue_in_parallel() -> None:
    spec = make_spec(CONFIG)
    # Each execution waits for one on the other instance: executions one at a time would wait
    # out the barrier's timeout and fail.
    meet = threading.Barrier(2, timeout=10)
    instances = [
        RecordingInstance(spec, delay_s=0.3, index=i, fail_batch=lambda _: (meet.wait(), None)[1])
        for i in range(2)
    ]
    scheduler = await started(instances)
    loop = asyncio.get_running_loop()
    began = loop.time()
    responses = await asyncio.gather(*(scheduler.infer(request(f"r{i}")) for i in range(4)))
    assert loop.time() - began > 0.55  # two rounds of two executions of 0.3 s each
    assert sorted(int(r.outputs["INSTANCE"][0]) for r in responses) == [0, 0, 1, 1]
    assert scheduler.statistics.pending_request_count == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_queue_depth_and_in_flight_while_busy() -> None:
    instance = RecordingInstance(make_spec(CONFIG), delay_s=0.2)
    scheduler = await started([instance])
    tasks = [asyncio.create_task(scheduler.infer(request(f"r{i}"))) for i in range(3)]
    await asyncio.sleep(0.05)
    assert scheduler.in_flight == 3 and scheduler.queue_depth == 2
    assert scheduler.statistics.pending_request_count == 2
    await asyncio.gather(*tasks)
    assert scheduler.in_flight == 0 and scheduler.queue_depth == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_backend_error_fails_only_that_request_and_is_counted() -> None:
    def fail_r1(req):  # type: ignore[no-untyped-def]
        return ServingError("bad input") if req.id == "r1" else None

    instance = RecordingInstance(make_spec(CONFIG), fail_request=fail_r1)
    scheduler = await started([instance])
    results = await asyncio.gather(
        *(scheduler.infer(request(f"r{i}")) for i in range(3)), return_exceptions=True
    )
    assert isinstance(results[1], ServingError) and results[1].message == "bad input"
    assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
    stats = scheduler.statistics
    assert stats.failures_by_reason["BACKEND"] == 1 and stats.success.count == 2
    assert stats.inference_count == 2 and stats.execution_count == 3
    await scheduler.stop(drain_timeout_s=1)


async def test_exception_raised_by_execute_becomes_the_requests_error() -> None:
    instance = RecordingInstance(make_spec(CONFIG), fail_batch=boom("runtime crashed"))
    scheduler = await started([instance])
    with pytest.raises(ServingError, match="runtime crashed") as info:
        await scheduler.infer(request("r0"))
    assert info.value.code is ErrorCode.INTERNAL
    assert scheduler.statistics.failures_by_reason["BACKEND"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_cancelled_queued_request_is_dropped_and_counted() -> None:
    instance = RecordingInstance(make_spec(CONFIG), delay_s=0.2)
    scheduler = await started([instance])
    first = asyncio.create_task(scheduler.infer(request("r0")))
    second = asyncio.create_task(scheduler.infer(request("r1")))
    await asyncio.sleep(0.05)
    second.cancel()
    await asyncio.sleep(0)
    assert scheduler.queue_depth == 0
    assert (await first).id == "r0"
    with pytest.raises(asyncio.CancelledError):
        await second
    assert instance.batches == [["r0"]]
    assert scheduler.statistics.failures_by_reason["CANCELED"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_cancelled_executing_request_does_not_break_the_instance() -> None:
    instance = RecordingInstance(make_spec(CONFIG), delay_s=0.1)
    scheduler = await started([instance])
    first = asyncio.create_task(scheduler.infer(request("r0")))
    await asyncio.sleep(0.03)
    first.cancel()
    assert (await scheduler.infer(request("r1"))).id == "r1"
    assert scheduler.statistics.failures_by_reason["CANCELED"] == 1
    assert scheduler.in_flight == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_stop_drains_in_flight_then_refuses_new_requests() -> None:
    instance = RecordingInstance(make_spec(CONFIG), delay_s=0.1)
    scheduler = await started([instance])
    tasks = [asyncio.create_task(scheduler.infer(request(f"r{i}"))) for i in range(2)]
    await asyncio.sleep(0.01)
    await scheduler.stop(drain_timeout_s=2)
    assert [t.result().id for t in tasks] == ["r0", "r1"]
    with pytest.raises(UnavailableError, match="Server is stopping"):
        await scheduler.infer(request("late"))


async def test_stop_past_drain_timeout_fails_what_is_still_queued() -> None:
    instance = RecordingInstance(make_spec(CONFIG), delay_s=0.3)
    scheduler = await started([instance])
    tasks = [asyncio.create_task(scheduler.infer(request(f"r{i}"))) for i in range(2)]
    await asyncio.sleep(0.01)
    assert scheduler.statistics.pending_request_count > 0  # r1 (at least) waits behind r0
    await scheduler.stop(drain_timeout_s=0.05)
    for task in tasks:
        with pytest.raises(UnavailableError):
            await task
    assert scheduler.in_flight == 0
    assert scheduler.statistics.pending_request_count == 0  # the gauge follows the emptied queue


async def test_a_scheduling_bug_fails_its_batch_and_the_worker_keeps_serving() -> None:
    class Flaky(DefaultScheduler):
        broken = True

        async def _execute(self, instance, batch, reason):  # type: ignore[no-untyped-def]
            if self.broken:
                self.broken = False
                raise RuntimeError("bug")
            await super()._execute(instance, batch, reason)

    from serving.core.statistics import ModelStatistics

    spec = make_spec(CONFIG)
    scheduler = Flaky(
        spec=spec, instances=[RecordingInstance(spec)], statistics=ModelStatistics("m", 1)
    )
    await scheduler.start()
    with pytest.raises(ServingError, match="scheduling failed: bug"):
        await scheduler.infer(request("r0"))
    assert (await scheduler.infer(request("r1"))).id == "r1"
    assert scheduler.statistics.failures_by_reason["OTHER"] == 1 and scheduler.in_flight == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_default_scheduler_queue_is_bounded_and_refuses_with_exceeds_maximum_queue_size() -> (
    None
):
    instance = RecordingInstance(make_spec(CONFIG))
    instance.gate = threading.Event()
    scheduler = await started([instance])
    held = asyncio.create_task(scheduler.infer(request("hold")))
    while not instance.batches:
        await asyncio.sleep(0.002)
    queued = [asyncio.create_task(scheduler.infer(request(f"r{i}"))) for i in range(1024)]
    await asyncio.sleep(0.01)
    assert scheduler.queue_depth == scheduler.max_queue_size == 1024
    with pytest.raises(UnavailableError, match="^Exceeds maximum queue size$"):
        await scheduler.infer(request("one too many"))
    assert scheduler.statistics.failures_by_reason["REJECTED"] == 1
    instance.gate.set()
    await asyncio.gather(held, *queued)
    await scheduler.stop(drain_timeout_s=1)
