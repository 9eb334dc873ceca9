"""The dynamic batcher: batch composition, delays, shapes, priorities, ordering and cancellation.

The instance is held on a gate while requests queue, so the batch formed when it frees up is
exactly determined by what was queued.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from serving.core.statistics import ModelStatistics
from serving.errors import ServingError
from serving.schedulers.dynamic import DynamicBatcher
from serving.schedulers.factory import create_scheduler
from tests.serving.schedulers.fakes import RecordingInstance, boom, make_spec, request

pytestmark = pytest.mark.embedded


def config(batching: str = "", *, max_batch: int = 8, dims: str = "[4]", extra: str = "") -> str:
    return (
        f'name: "m" max_batch_size: {max_batch} '
        f'input {{ name: "IN" data_type: TYPE_FP32 dims: {dims} {extra} }} '
        f"dynamic_batching {{ {batching} }}"
    )


async def started(text: str, *, count: int = 1, **kw: object) -> tuple[DynamicBatcher, list]:
    spec = make_spec(text)
    instances = [RecordingInstance(spec, index=i, **kw) for i in range(count)]  # type: ignore[arg-type]
    scheduler = create_scheduler(
        spec=spec, instances=instances, statistics=ModelStatistics("m", 1), server=None
    )
    assert isinstance(scheduler, DynamicBatcher)
    await scheduler.start()
    return scheduler, instances


async def hold(scheduler: DynamicBatcher, instance: RecordingInstance) -> asyncio.Task:
    """Occupy the instance with request "hold" until the gate opens."""
    instance.gate = threading.Event()
    task = asyncio.create_task(scheduler.infer(request("hold")))
    while not instance.batches:
        await asyncio.sleep(0.002)
    return task


async def submit(scheduler: DynamicBatcher, *requests) -> list[asyncio.Task]:  # type: ignore[no-untyped-def]
    tasks = [asyncio.create_task(scheduler.infer(r)) for r in requests]
    await asyncio.sleep(0.01)
    return tasks


async def release(instance: RecordingInstance, held: asyncio.Task, tasks: list) -> list:
    assert instance.gate is not None
    instance.gate.set()
    await held
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_batch_grows_to_largest_reachable_preferred_size() -> None:
    scheduler, [instance] = await started(config("preferred_batch_size: [2, 4]"))
    held = await hold(scheduler, instance)
    tasks = await submit(scheduler, *(request(f"r{i}") for i in range(1, 6)))
    await release(instance, held, tasks)
    assert instance.batches == [["hold"], ["r1", "r2", "r3", "r4"], ["r5"]]
    reasons = scheduler.statistics.batch_release_reasons
    assert reasons["preferred_size"] == 1 and reasons["instance_idle"] == 2
    await scheduler.stop(drain_timeout_s=1)


async def test_requests_are_never_split_and_max_batch_size_is_respected() -> None:
    scheduler, [instance] = await started(config())
    held = await hold(scheduler, instance)
    tasks = await submit(scheduler, *(request(f"r{i}", batch=3) for i in range(3)))
    responses = await release(instance, held, tasks)
    assert instance.batches[1:] == [["r0", "r1"], ["r2"]]
    assert all(r.outputs["OUT"].shape == (3, 4) for r in responses)
    stats = scheduler.statistics.triton_dict()
    assert [b["batch_size"] for b in stats["batch_stats"]] == [1, 3, 6]  # type: ignore[index]
    assert stats["inference_count"] == 10 and stats["execution_count"] == 3
    assert scheduler.statistics.batch_release_reasons["max_batch"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_queue_delay_waits_for_more_requests_then_sends_what_is_there() -> None:
    scheduler, [instance] = await started(
        config("preferred_batch_size: [4] max_queue_delay_microseconds: 150000")
    )
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.gather(scheduler.infer(request("a")), scheduler.infer(request("b")))
    assert loop.time() - began >= 0.14
    assert instance.batches == [["a", "b"]]
    assert scheduler.statistics.batch_release_reasons["queue_delay"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_preferred_size_is_sent_without_waiting_for_the_delay() -> None:
    scheduler, [instance] = await started(
        config("preferred_batch_size: [4] max_queue_delay_microseconds: 2000000")
    )
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.gather(*(scheduler.infer(request(f"r{i}")) for i in range(4)))
    assert loop.time() - began < 1.0
    assert instance.batches == [["r0", "r1", "r2", "r3"]]
    await scheduler.stop(drain_timeout_s=1)


async def test_incompatible_shapes_never_share_a_batch() -> None:
    scheduler, [instance] = await started(config(dims="[-1]"))
    held = await hold(scheduler, instance)
    tasks = await submit(
        scheduler,
        request("a", width=4),
        request("b", width=4),
        request("c", width=5),
        request("d", width=4),
    )
    await release(instance, held, tasks)
    assert instance.batches[1:] == [["a", "b"], ["c"], ["d"]]
    assert scheduler.statistics.batch_release_reasons["incompatible"] == 2
    await scheduler.stop(drain_timeout_s=1)


async def test_ragged_inputs_may_share_a_batch() -> None:
    scheduler, [instance] = await started(config(dims="[-1]", extra="allow_ragged_batch: true"))
    held = await hold(scheduler, instance)
    tasks = await submit(scheduler, request("a", width=4), request("b", width=5))
    await release(instance, held, tasks)
    assert instance.batches[1:] == [["a", "b"]]
    await scheduler.stop(drain_timeout_s=1)


async def test_optional_input_presence_must_agree() -> None:
    text = config().replace(
        "dynamic_batching",
        'input { name: "OPT" data_type: TYPE_FP32 dims: [1] optional: true } dynamic_batching',
    )
    scheduler, [instance] = await started(text)
    held = await hold(scheduler, instance)
    with_opt = request("b")
    with_opt.inputs["OPT"] = np.zeros((1, 1), dtype=np.float32)
    tasks = await submit(scheduler, request("a"), with_opt, request("c"))
    await release(instance, held, tasks)
    assert instance.batches[1:] == [["a"], ["b"], ["c"]]
    await scheduler.stop(drain_timeout_s=1)


async def test_higher_priority_level_is_served_first() -> None:
    scheduler, [instance] = await started(
        config("priority_levels: 2 default_priority_level: 2", max_batch=1)
    )
    held = await hold(scheduler, instance)
    tasks = await submit(
        scheduler,
        request("low1"),
        request("low2", priority=2),
        request("high", priority=1),
        request("out_of_range", priority=7),
    )
    await release(instance, held, tasks)
    assert instance.batches[1:] == [["high"], ["low1"], ["low2"], ["out_of_range"]]
    await scheduler.stop(drain_timeout_s=1)


async def test_full_queue_rejects_with_exceeds_maximum_queue_size() -> None:
    scheduler, [instance] = await started(
        config("default_queue_policy { max_queue_size: 2 }", max_batch=1)
    )
    held = await hold(scheduler, instance)
    tasks = await submit(scheduler, request("a"), request("b"))
    with pytest.raises(ServingError, match="^Exceeds maximum queue size$") as info:
        await scheduler.infer(request("c"))
    assert info.value.code.value == "UNAVAILABLE"
    await release(instance, held, tasks)
    assert scheduler.statistics.failures_by_reason["REJECTED"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_reject_policy_fails_a_request_queued_past_its_timeout_while_instances_busy() -> None:
    scheduler, [instance] = await started(
        config("default_queue_policy { default_timeout_microseconds: 50000 }", max_batch=1)
    )
    held = await hold(scheduler, instance)
    task = asyncio.create_task(scheduler.infer(request("late")))
    with pytest.raises(ServingError, match="^Request timeout expired$") as info:
        await asyncio.wait_for(task, timeout=2)
    assert info.value.code.value == "UNAVAILABLE"
    assert not held.done()  # rejected on time, not when the instance freed up
    await release(instance, held, [])
    assert ["late"] not in instance.batches
    assert scheduler.statistics.failures_by_reason["REJECTED"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_delay_policy_moves_a_timed_out_request_behind_the_others() -> None:
    scheduler, [instance] = await started(
        config(
            "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 100000 }",
            max_batch=1,
        )
    )
    held = await hold(scheduler, instance)
    tasks = await submit(scheduler, request("old"))
    await asyncio.sleep(0.6)  # six times the timeout: the timer fires even on a loaded machine
    # "new" is released well before its own 100 ms timeout would delay it too
    tasks.append(asyncio.create_task(scheduler.infer(request("new"))))
    await asyncio.sleep(0.005)
    results = await release(instance, held, tasks)
    assert [r.id for r in results] == ["old", "new"]  # delayed, not rejected
    assert instance.batches[1:] == [["new"], ["old"]]
    await scheduler.stop(drain_timeout_s=1)


async def test_request_timeout_can_only_shorten_the_policy_timeout_when_override_allowed() -> None:
    policy = "default_queue_policy { default_timeout_microseconds: %d allow_timeout_override: %s }"
    cases = [(5_000_000, "true", True), (5_000_000, "false", False), (0, "true", False)]
    for default_us, allowed, expect_rejected in cases:
        scheduler, [instance] = await started(config(policy % (default_us, allowed), max_batch=1))
        held = await hold(scheduler, instance)
        tasks = await submit(scheduler, request("t", timeout_us=30_000))
        await asyncio.sleep(0.08)
        results = await release(instance, held, tasks)
        assert isinstance(results[0], ServingError) is expect_rejected, (default_us, allowed)
        await scheduler.stop(drain_timeout_s=1)


async def test_preserve_ordering_releases_responses_in_arrival_order() -> None:
    for preserve, expected in ((False, ["b", "a"]), (True, ["a", "b"])):
        spec = make_spec(config(f"preserve_ordering: {str(preserve).lower()}", max_batch=1))
        instances = [RecordingInstance(spec, delay_s=0.3), RecordingInstance(spec, index=1)]
        scheduler = create_scheduler(
            spec=spec, instances=instances, statistics=ModelStatistics("m", 1), server=None
        )
        await scheduler.start()
        order: list[str] = []

        async def call(rid: str, scheduler=scheduler, order=order) -> None:  # type: ignore[no-untyped-def]
            await scheduler.infer(request(rid))
            order.append(rid)

        first = asyncio.create_task(call("a"))
        await asyncio.sleep(0.02)
        await asyncio.gather(first, call("b"))
        assert order == expected
        await scheduler.stop(drain_timeout_s=1)


async def test_cancelled_queued_request_is_dropped_and_its_batch_unharmed() -> None:
    scheduler, [instance] = await started(config())
    held = await hold(scheduler, instance)
    tasks = await submit(scheduler, request("a"), request("b"), request("c"))
    tasks[1].cancel()
    await asyncio.sleep(0)
    results = await release(instance, held, tasks)
    assert instance.batches[1:] == [["a", "c"]]
    assert isinstance(results[1], asyncio.CancelledError)
    assert results[0].id == "a" and results[2].id == "c"
    assert scheduler.statistics.failures_by_reason["CANCELED"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_cancelling_a_request_of_an_executing_batch_leaves_its_neighbours_answered() -> None:
    scheduler, [instance] = await started(config("max_queue_delay_microseconds: 20000"))
    instance.gate = threading.Event()
    tasks = await submit(scheduler, request("a"), request("b"))
    while not instance.batches:
        await asyncio.sleep(0.002)
    assert instance.batches == [["a", "b"]]
    tasks[0].cancel()
    instance.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError) and results[1].id == "b"
    assert scheduler.statistics.failures_by_reason["CANCELED"] == 1
    assert scheduler.statistics.success.count == 1 and scheduler.in_flight == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_failed_batch_sets_the_error_on_every_request() -> None:
    scheduler, [instance] = await started(config(), fail_batch=boom("device lost"))
    results = await asyncio.gather(
        *(scheduler.infer(request(f"r{i}")) for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, ServingError) and "device lost" in str(r) for r in results)
    assert scheduler.statistics.failures_by_reason["BACKEND"] == 3
    await scheduler.stop(drain_timeout_s=1)


async def test_request_larger_than_every_preferred_size_goes_without_waiting_the_delay() -> None:
    scheduler, [instance] = await started(
        config("preferred_batch_size: [4] max_queue_delay_microseconds: 3000000")
    )
    loop = asyncio.get_running_loop()
    began = loop.time()
    await scheduler.infer(request("big", batch=6))
    assert loop.time() - began < 1.5 and instance.batches == [["big"]]
    assert scheduler.statistics.batch_release_reasons["max_batch"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_unset_max_queue_size_is_bounded_by_the_default() -> None:
    from serving.schedulers.queue_bounds import default_max_queue_size

    scheduler, [instance] = await started(config("", max_batch=4))
    bound = default_max_queue_size(4)
    assert bound == 1024
    held = await hold(scheduler, instance)
    tasks = await submit(scheduler, *(request(f"r{i}") for i in range(bound)))
    with pytest.raises(ServingError, match="^Exceeds maximum queue size$") as info:
        await scheduler.infer(request("one too many"))
    assert info.value.code.value == "UNAVAILABLE"
    results = await release(instance, held, tasks)
    assert not any(isinstance(r, BaseException) for r in results)
    await scheduler.stop(drain_timeout_s=1)


def test_default_queue_bound_grows_with_max_batch_size() -> None:
    from serving.schedulers.queue_bounds import default_max_queue_size

    assert default_max_queue_size(0) == default_max_queue_size(16) == 1024
    assert default_max_queue_size(64) == 4096
