"""The dynamic batcher under a seeded storm: two instances taking batches on their own threads
(``BatchExecutor.run_chain``), or some on the loop, while the loop admits requests, cancels some,
times others out and, in half the cases, stops the scheduler midway.

No timing is asserted. What must hold whatever the interleaving: every request is answered, no
request runs twice, a request rejected for its timeout never ran, an answered one did, batches
respect ``max_batch_size``, and the statistics add up to what the clients saw.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Sequence

import pytest

from serving.backends.base import ExecuteResult
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest
from serving.errors import ServingError
from serving.schedulers.factory import create_scheduler
from tests.serving.schedulers.fakes import RecordingInstance, make_spec, request

pytestmark = pytest.mark.embedded

MAX_BATCH = 8
REQUESTS = 1500
CANCELS = 200
TIMED_OUT = "Request timeout expired"
STOPPING = "Server is stopping"

POLICIES = {
    "no delay": "",
    "a delay": "max_queue_delay_microseconds: 300",
    "timeouts delay": (
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 "
        "allow_timeout_override: true }"
    ),
    "timeouts reject": (
        "default_queue_policy { default_timeout_microseconds: 3000 allow_timeout_override: true }"
    ),
    "priorities": "priority_levels: 3 default_priority_level: 2",
}


def _config(batching: str) -> str:
    return (
        f'name: "m" max_batch_size: {MAX_BATCH} '
        'input { name: "IN" data_type: TYPE_FP32 dims: [4] } '
        "instance_group [{ count: 2 kind: KIND_CPU }] "
        f"dynamic_batching {{ {batching} }}"
    )


class SometimesCheapInstance(RecordingInstance):
    """May run on the loop (``can_run_inline``); most batches are instant, one in twenty takes
    1 ms, so its batches move between the loop and its thread as the estimate rises and decays."""

    def __init__(self, *args: object, rnd: random.Random, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self._rnd = random.Random(rnd.random())  # its own: it is drawn from on two threads

    def can_run_inline(self) -> bool:
        return True

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        self.delay_s = 0.001 if self._rnd.random() < 0.05 else 0.0
        return super().execute(requests)


async def _storm(seed: int, batching: str, *, stop_midway: bool, inline: bool) -> None:
    rnd = random.Random(seed)
    spec = make_spec(_config(batching))
    if inline:
        instances = [SometimesCheapInstance(spec, index=i, rnd=rnd) for i in range(2)]
    else:  # 2 ms per batch (the GIL released, as a runtime does): the queue stays deep
        instances = [RecordingInstance(spec, index=i, delay_s=0.002) for i in range(2)]
    statistics = ModelStatistics("m", 1)
    scheduler = create_scheduler(spec=spec, instances=instances, statistics=statistics, server=None)
    await scheduler.start()
    tasks: dict[str, asyncio.Task] = {}

    async def admit() -> None:
        for i in range(REQUESTS):
            fields: dict[str, object] = {}
            if rnd.random() < 0.2:
                fields["timeout_us"] = rnd.choice([100, 500, 2000, 5000])
            if "priority_levels" in batching:
                fields["priority"] = rnd.choice([0, 1, 2, 3])
            tasks[str(i)] = asyncio.create_task(scheduler.infer(request(str(i), **fields)))
            if rnd.random() < 0.3:
                await asyncio.sleep(0)
            if rnd.random() < 0.05:
                await asyncio.sleep(rnd.random() * 0.002)

    async def cancel_some() -> None:
        for _ in range(CANCELS):
            await asyncio.sleep(rnd.random() * 0.003)
            if tasks:
                tasks[rnd.choice(list(tasks))].cancel()

    canceller = asyncio.create_task(cancel_some())
    await admit()
    if stop_midway:
        await asyncio.sleep(rnd.random() * 0.05)
        await asyncio.wait_for(scheduler.stop(drain_timeout_s=0.0), 10)
    await canceller
    _, unanswered = await asyncio.wait(list(tasks.values()), timeout=30)
    assert not unanswered, f"{len(unanswered)} requests were never answered"
    if not stop_midway:
        await scheduler.stop(drain_timeout_s=1)

    seen: Counter[str] = Counter()
    ran = Counter(rid for instance in instances for batch in instance.batches for rid in batch)
    for rid, task in tasks.items():
        if task.cancelled():
            seen["cancelled"] += 1
            continue
        error = task.exception()
        if error is None:
            assert task.result().id == rid
            assert rid in ran, f"request {rid} was answered but never ran"
            seen["ok"] += 1
            continue
        assert isinstance(error, ServingError), repr(error)
        message = str(error)
        if message == TIMED_OUT:
            assert rid not in ran, f"request {rid} was rejected for its timeout but it ran"
            seen["rejected"] += 1
        else:
            assert message.startswith(STOPPING), message
            seen["stopping"] += 1

    assert [rid for rid, times in ran.items() if times > 1] == []
    assert max(len(batch) for instance in instances for batch in instance.batches) <= MAX_BATCH
    assert scheduler.queue_depth == 0
    assert statistics.pending_request_count == 0
    if stop_midway:  # a batch that ended after stop() answered its requests counts none
        assert statistics.inference_count <= sum(ran.values())
    else:
        assert statistics.inference_count == sum(ran.values())
    failures = statistics.failures_by_reason
    # A client may cancel after its answer was set and before its task resumed (the scheduler
    # counted the answer), or before its task first ran (the scheduler never saw the request).
    for counted, answered in (
        (statistics.success.count, seen["ok"]),
        (failures["REJECTED"], seen["rejected"]),
        (failures["OTHER"], seen["stopping"]),
    ):
        assert answered <= counted <= answered + seen["cancelled"]
    assert failures["CANCELED"] <= seen["cancelled"]
    counted_all = statistics.success.count + sum(failures.values())
    assert REQUESTS - seen["cancelled"] <= counted_all <= REQUESTS
    if not stop_midway:
        assert seen["stopping"] == 0


@pytest.mark.parametrize("stop_midway", [False, True], ids=["to the end", "stopped midway"])
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("inline", [False, True], ids=["on threads", "some on the loop"])
async def test_every_request_is_answered_once_whatever_the_interleaving(
    inline: bool, policy: str, stop_midway: bool
) -> None:
    await _storm(7, POLICIES[policy], stop_midway=stop_midway, inline=inline)
