"""The sequence batcher under a seeded storm: more live sequences than batch slots, each client
sending its next request when the last is answered, two instances, and a stop half-way through.

No timing is asserted. What must hold whatever the interleaving: each sequence's requests run
once each and in order, on one instance under the direct strategy; the controls say where each
request sits in its sequence; a filler request carries no sequence (READY 0, CORRID 0); and every
client gets an answer.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

import pytest

from serving.core.statistics import ModelStatistics
from serving.errors import ServingError
from serving.schedulers.factory import create_scheduler
from serving.schedulers.sequence import SequenceBatcher
from tests.serving.schedulers.fakes import RecordingInstance, make_spec
from tests.serving.schedulers.test_sequence import config, controls, seq

pytestmark = pytest.mark.embedded

SEQUENCES = 60
LONGEST = 16
STRATEGIES = {
    "direct": "direct { }",
    "direct with a delay": "direct { max_queue_delay_microseconds: 500 }",
    "oldest": "oldest { max_candidate_sequences: 6 }",
    "oldest with a delay": (
        "oldest { max_candidate_sequences: 6 max_queue_delay_microseconds: 500 }"
    ),
}
STOPPING = "Server is stopping"


async def _storm(seed: int, strategy: str, *, stop_midway: bool) -> None:
    rnd = random.Random(seed)
    spec = make_spec(config(max_batch=4, strategy=strategy, idle_us=30_000_000))
    instances = [RecordingInstance(spec, index=i, delay_s=0.001) for i in range(2)]
    statistics = ModelStatistics("s", 1)
    scheduler = create_scheduler(spec=spec, instances=instances, statistics=statistics, server=None)
    assert isinstance(scheduler, SequenceBatcher)
    await scheduler.start()
    lengths = {corrid: rnd.randint(1, LONGEST) for corrid in range(1, SEQUENCES + 1)}
    pauses = {corrid: random.Random(rnd.random()) for corrid in lengths}
    answered: dict[int, int] = defaultdict(int)

    async def client(corrid: int) -> None:
        length = lengths[corrid]
        for position in range(length):
            start, end = position == 0, position == length - 1
            rid = f"{corrid}:{position}"
            response = await scheduler.infer(
                seq(rid, corrid, start=start, end=end, value=float(position))
            )
            assert response.id == rid
            assert controls(response) == (int(start), float(end), True, corrid)
            answered[corrid] += 1
            if pauses[corrid].random() < 0.3:
                await asyncio.sleep(pauses[corrid].random() * 0.003)

    clients = [asyncio.create_task(client(corrid)) for corrid in lengths]
    if stop_midway:  # the whole storm takes about 0.2 s
        await asyncio.sleep(0.02 + rnd.random() * 0.08)
        await asyncio.wait_for(scheduler.stop(drain_timeout_s=0.0), 10)
    _, unanswered = await asyncio.wait(clients, timeout=30)
    assert not unanswered, f"{len(unanswered)} clients were left waiting"
    for task in clients:
        error = task.exception()
        if error is not None:
            assert stop_midway, repr(error)
            assert isinstance(error, ServingError) and str(error).startswith(STOPPING), repr(error)
    if not stop_midway:
        assert answered == lengths
        await scheduler.stop(drain_timeout_s=1)

    # What each instance ran, in order: (corrid, position) for real requests.
    ran: dict[int, list[int]] = defaultdict(list)
    ran_on: dict[int, set[int]] = defaultdict(set)
    for instance in instances:
        for batch in instance.inputs_seen:
            assert len(batch) <= 4
            for inputs in batch:
                if not bool(inputs["READY"].reshape(-1)[0]):  # a filler in a free slot
                    assert int(inputs["CORRID"].reshape(-1)[0]) == 0
                    continue
                corrid = int(inputs["CORRID"].reshape(-1)[0])
                position = int(inputs["IN"].reshape(-1)[0])
                assert int(inputs["START"].reshape(-1)[0]) == int(position == 0)
                ran[corrid].append(position)
                ran_on[corrid].add(instance.index)
    for corrid, positions in ran.items():
        # Run once each, in order: a client sends its next request only after an answer, so
        # any repeat or reordering is the scheduler's.
        assert positions == list(range(len(positions))), (corrid, positions)
        assert len(positions) in (answered[corrid], answered[corrid] + 1)
        if strategy.startswith("direct"):
            assert len(ran_on[corrid]) == 1, f"sequence {corrid} moved between instances"
    if not stop_midway:
        assert {corrid: len(positions) for corrid, positions in ran.items()} == lengths
        assert statistics.success.count == sum(lengths.values())
    assert scheduler.queue_depth == 0
    assert statistics.pending_request_count == 0


@pytest.mark.parametrize("stop_midway", [False, True], ids=["to the end", "stopped midway"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
async def test_each_sequence_runs_once_in_order_whatever_the_interleaving(
    strategy: str, stop_midway: bool
) -> None:
    await _storm(11, STRATEGIES[strategy], stop_midway=stop_midway)
