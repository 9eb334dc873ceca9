"""Cheap runs on the event loop: the estimate that decides it, and the schedulers that use it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from serving.backends.base import ExecuteResult
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest
from serving.errors import InvalidArgumentError
from serving.schedulers.factory import create_scheduler
from serving.schedulers.inline import MAX_INLINE_INPUT_BYTES, InlineEstimate, configured_budget_us
from serving.schedulers.queued import QueuedScheduler
from tests.serving.schedulers.fakes import RecordingInstance, make_spec, request

pytestmark = pytest.mark.embedded

CONFIG = 'name: "m" max_batch_size: 8 input { name: "IN" data_type: TYPE_FP32 dims: [4] }'
# A budget no test run exceeds, so that which runs stay on the loop does not depend on the machine.
GENEROUS = (
    CONFIG + ' parameters { key: "inline_execution_budget_us" value { string_value: "1000000" } }'
)


class InlineCapable(RecordingInstance):
    """A RecordingInstance that allows runs on the loop and records the thread of each run."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.threads: list[int] = []

    def can_run_inline(self) -> bool:
        return True

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        self.threads.append(threading.get_ident())
        return super().execute(requests)


async def started(instances: list[RecordingInstance]) -> QueuedScheduler:
    scheduler = create_scheduler(
        spec=instances[0].spec, instances=instances, statistics=ModelStatistics("m", 1),
        server=None,
    )  # fmt: skip
    assert isinstance(scheduler, QueuedScheduler)
    await scheduler.start()
    return scheduler


def small() -> list[InferRequest]:
    return [request("r")]


def test_the_estimate_is_unknown_until_a_first_run_so_that_run_goes_to_a_thread() -> None:
    estimate = InlineEstimate(budget_us=200)
    assert not estimate.should_inline(small())
    estimate.observe(20_000)
    assert estimate.should_inline(small())


def test_one_expensive_run_sends_the_next_off_the_loop_and_many_cheap_ones_bring_it_back() -> None:
    estimate = InlineEstimate(budget_us=200)
    estimate.observe(20_000)
    estimate.observe(5_000_000)
    assert not estimate.should_inline(small())
    cheap_runs = 0
    while not estimate.should_inline(small()):
        estimate.observe(20_000)
        cheap_runs += 1
    assert 10 < cheap_runs < 100


def test_large_inputs_never_run_on_the_loop_and_a_zero_budget_turns_it_off() -> None:
    estimate = InlineEstimate(budget_us=200)
    estimate.observe(1_000)
    rows = MAX_INLINE_INPUT_BYTES // 16 + 1  # 4 float32 per row
    assert not estimate.should_inline([request("big", batch=rows)])
    off = InlineEstimate(budget_us=0)
    off.observe(1_000)
    assert not off.should_inline(small())


def test_the_budget_comes_from_the_model_config() -> None:
    assert configured_budget_us(make_spec(CONFIG).config) == 200
    assert configured_budget_us(make_spec(GENEROUS).config) == 1_000_000


async def test_cheap_runs_move_onto_the_loop_thread_after_the_first() -> None:
    instance = InlineCapable(make_spec(GENEROUS))
    scheduler = await started([instance])
    loop_thread = threading.get_ident()
    for index in range(4):
        response = await scheduler.infer(request(f"r{index}", value=index))
        assert np.array_equal(response.outputs["OUT"], np.full((1, 4), 2.0 * index, np.float32))
    assert instance.threads[0] != loop_thread
    assert instance.threads[1:] == [loop_thread] * 3
    stats = scheduler.statistics.triton_dict()
    assert stats["execution_count"] == 4 and stats["inference_count"] == 4
    assert stats["inference_stats"]["success"]["count"] == 4  # type: ignore[index]
    await scheduler.stop(drain_timeout_s=1)


async def test_a_slow_instance_keeps_running_on_its_thread() -> None:
    instance = InlineCapable(make_spec(CONFIG), delay_s=0.005)
    scheduler = await started([instance])
    for index in range(3):
        await scheduler.infer(request(f"r{index}"))
    assert threading.get_ident() not in instance.threads
    await scheduler.stop(drain_timeout_s=1)


async def test_backends_that_do_not_allow_it_always_run_on_a_thread() -> None:
    instance = RecordingInstance(make_spec(CONFIG))
    seen: list[int] = []
    original = instance.execute

    def execute(requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        seen.append(threading.get_ident())
        return original(requests)

    instance.execute = execute  # type: ignore[method-assign]
    scheduler = await started([instance])
    for index in range(3):
        await scheduler.infer(request(f"r{index}"))
    assert threading.get_ident() not in seen
    await scheduler.stop(drain_timeout_s=1)


def big(request_id: str) -> InferRequest:
    """A request whose inputs are too large to run on the loop, whatever the estimate."""
    return request(request_id, batch=MAX_INLINE_INPUT_BYTES // 16 + 1)


async def test_a_cheap_request_runs_at_once_on_an_idle_instance_beside_a_busy_one() -> None:
    spec = make_spec(GENEROUS)
    first, second = InlineCapable(spec, index=0), InlineCapable(spec, index=1)
    scheduler = await started([first, second])
    for index in range(2):
        await scheduler.infer(request(f"warm{index}"))  # the estimate is known and cheap now
    first.gate = second.gate = threading.Event()
    held = asyncio.create_task(scheduler.infer(big("big")))  # on a thread, held by the gate
    await asyncio.sleep(0.05)
    holder = first if first.batches[-1] == ["big"] else second
    other = second if holder is first else first
    other.gate = None
    answer = await asyncio.wait_for(scheduler.infer(request("small")), timeout=5)
    assert answer.id == "small" and not held.done()
    assert other.batches[-1] == ["small"] and other.threads[-1] == threading.get_ident()
    holder.gate.set()  # type: ignore[union-attr]
    assert (await held).id == "big"
    await scheduler.stop(drain_timeout_s=1)


async def test_a_cheap_request_queues_behind_a_busy_instance_and_never_overtakes() -> None:
    instance = InlineCapable(make_spec(GENEROUS))
    scheduler = await started([instance])
    for index in range(2):
        await scheduler.infer(request(f"warm{index}"))
    instance.gate = threading.Event()
    held = asyncio.create_task(scheduler.infer(big("big")))
    await asyncio.sleep(0.05)
    later = [asyncio.create_task(scheduler.infer(request(f"r{i}"))) for i in range(2)]
    await asyncio.sleep(0.05)
    assert scheduler.queue_depth == 2
    instance.gate.set()
    answers = await asyncio.gather(held, *later)
    assert [a.id for a in answers] == ["big", "r0", "r1"]
    assert instance.batches[2:] == [["big"], ["r0"], ["r1"]]
    await scheduler.stop(drain_timeout_s=1)


async def test_runs_on_the_loop_are_counted_and_a_failed_one_raises_its_own_error() -> None:
    instance = InlineCapable(
        make_spec(GENEROUS),
        fail_request=lambda r: InvalidArgumentError("refused") if r.id == "bad" else None,
    )
    scheduler = await started([instance])
    for index in range(3):
        answer = await scheduler.infer(request(f"r{index}"))
        assert answer.id == f"r{index}"
    assert instance.threads[-1] == threading.get_ident()  # these did run on the loop
    with pytest.raises(InvalidArgumentError, match="refused"):
        await scheduler.infer(request("bad"))
    assert instance.threads[-1] == threading.get_ident()
    stats = scheduler.statistics.triton_dict()
    assert stats["inference_count"] == 3 and stats["execution_count"] == 4
    assert stats["inference_stats"]["success"]["count"] == 3
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert scheduler.in_flight == 0
    await scheduler.stop(drain_timeout_s=1)
