"""The sequence batcher: routing, controls, padding, backlog, idle timeout, implicit state."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from serving.backends.base import ExecuteResult
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest, InferResponse
from serving.errors import ServingError
from serving.schedulers.factory import create_scheduler
from serving.schedulers.sequence import SequenceBatcher
from tests.serving.schedulers.fakes import RecordingInstance, make_spec, request

pytestmark = pytest.mark.embedded

CONTROLS = """
  control_input { name: "START"
    control { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } }
  control_input { name: "END"
    control { kind: CONTROL_SEQUENCE_END fp32_false_true: [0, 1] } }
  control_input { name: "READY"
    control { kind: CONTROL_SEQUENCE_READY bool_false_true: [false, true] } }
  control_input { name: "CORRID"
    control { kind: CONTROL_SEQUENCE_CORRID data_type: %s } }
"""


def config(
    *, max_batch: int = 2, strategy: str = "", idle_us: int = 0, corrid: str = "TYPE_UINT64"
) -> str:
    return (
        f'name: "s" max_batch_size: {max_batch} '
        'input { name: "IN" data_type: TYPE_FP32 dims: [4] } '
        f"sequence_batching {{ {strategy} max_sequence_idle_microseconds: {idle_us} "
        f"{CONTROLS % corrid} }}"
    )


async def started(
    text: str, *, count: int = 1, cls: type[RecordingInstance] = RecordingInstance
) -> tuple[SequenceBatcher, list[RecordingInstance]]:
    spec = make_spec(text)
    instances = [cls(spec, index=i) for i in range(count)]
    scheduler = create_scheduler(
        spec=spec, instances=instances, statistics=ModelStatistics("s", 1), server=None
    )
    assert isinstance(scheduler, SequenceBatcher)
    await scheduler.start()
    return scheduler, instances


def seq(rid: str, corrid: int | str, *, start: bool = False, end: bool = False, value: float = 1.0):  # type: ignore[no-untyped-def]
    return request(
        rid, model="s", value=value, sequence_id=corrid, sequence_start=start, sequence_end=end
    )


def controls(response: InferResponse) -> tuple[int, float, bool, object]:
    out = response.outputs
    return (
        int(out["START"][0, 0]),
        float(out["END"][0, 0]),
        bool(out["READY"][0, 0]),
        out["CORRID"][0, 0],
    )


async def test_sequence_requests_need_a_correlation_id_batch_one_and_start_first() -> None:
    scheduler, _ = await started(config())
    with pytest.raises(ServingError) as info:
        await scheduler.infer(seq("a", 0, start=True))
    assert info.value.message == (
        "inference request to model 's' must specify a non-zero or non-empty correlation ID"
    )
    assert info.value.code.value == "INVALID_ARG"
    with pytest.raises(ServingError, match="must specify batch-size 1 due to requirements"):
        await scheduler.infer(request("b", model="s", batch=2, sequence_id=5, sequence_start=True))
    with pytest.raises(ServingError) as info:
        await scheduler.infer(seq("c", 77))
    assert info.value.message == (
        "inference request for sequence 77 to model 's' must specify the START flag on the "
        "first request of the sequence"
    )
    assert scheduler.statistics.failures_by_reason["OTHER"] == 3
    await scheduler.stop(drain_timeout_s=1)


async def test_interleaved_sequences_get_their_own_control_values() -> None:
    scheduler, [instance] = await started(config())
    a1 = await scheduler.infer(seq("a1", 11, start=True))
    b1 = await scheduler.infer(seq("b1", 12, start=True))
    a2 = await scheduler.infer(seq("a2", 11))
    b2 = await scheduler.infer(seq("b2", 12, end=True))
    a3 = await scheduler.infer(seq("a3", 11, end=True))
    assert controls(a1) == (1, 0.0, True, 11)
    assert controls(b1) == (1, 0.0, True, 12)
    assert controls(a2) == (0, 0.0, True, 11)
    assert controls(b2) == (0, 1.0, True, 12)
    assert controls(a3) == (0, 1.0, True, 11)
    assert a1.outputs["CORRID"].dtype == np.uint64 and a1.outputs["START"].dtype == np.int32
    assert a1.outputs["END"].dtype == np.float32 and a1.outputs["READY"].dtype == np.bool_
    assert a1.outputs["START"].shape == (1, 1)
    assert scheduler.active_sequences == 0
    await scheduler.stop(drain_timeout_s=1)


class SequenceRecorder(RecordingInstance):
    """Also records each request's correlation id, outputs asked for and response stream."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.seen: list[list[tuple[int | str, object, object]]] = []

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        self.seen.append([(r.sequence_id, r.outputs, r.responses) for r in requests])
        return super().execute(requests)


async def test_direct_batches_pad_empty_slots_with_null_requests() -> None:
    scheduler, [instance] = await started(config(), cls=SequenceRecorder)
    await scheduler.infer(seq("a1", 1, start=True))  # slot 0
    await scheduler.infer(seq("b1", 2, start=True, value=7.0))  # slot 1
    await scheduler.infer(seq("b2", 2, value=7.0))  # only slot 1 has work: slot 0 padded
    assert instance.batches[-1] == ["", "b2"]
    null, real = instance.inputs_seen[-1]
    assert [bool(inputs["READY"][0, 0]) for inputs in (null, real)] == [False, True]
    # Triton's null request: zeros shaped like the real one, correlation id 0 everywhere.
    assert null["IN"].shape == real["IN"].shape and not null["IN"].any()
    assert int(null["CORRID"][0, 0]) == 0 and int(real["CORRID"][0, 0]) == 2
    assert (int(null["START"][0, 0]), float(null["END"][0, 0])) == (0, 0.0)
    assert isinstance(instance, SequenceRecorder)
    assert instance.seen[-1][0] == (0, [], None)  # no outputs asked for, no response stream
    assert instance.seen[-1][1][0] == 2
    assert scheduler.statistics.inference_count == 3  # padding is not an inference
    instance.gate = threading.Event()
    held = asyncio.create_task(scheduler.infer(seq("a2", 1)))
    while len(instance.batches) < 4:
        await asyncio.sleep(0.002)
    both = [asyncio.create_task(scheduler.infer(seq(r, c))) for r, c in (("a3", 1), ("b3", 2))]
    await asyncio.sleep(0.01)
    instance.gate.set()
    await asyncio.gather(held, *both)
    assert instance.batches[-1] == ["a3", "b3"]  # two ready slots share one execution
    await scheduler.stop(drain_timeout_s=1)


async def test_sequences_spread_over_instances_and_stay_on_their_slot() -> None:
    scheduler, _ = await started(config(max_batch=1), count=2)
    a = await scheduler.infer(seq("a1", 1, start=True))
    b = await scheduler.infer(seq("b1", 2, start=True))
    assert int(a.outputs["INSTANCE"][0]) == 0 and int(b.outputs["INSTANCE"][0]) == 1
    for _ in range(3):
        again = await scheduler.infer(seq("b", 2))
        assert int(again.outputs["INSTANCE"][0]) == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_start_waits_in_the_backlog_until_a_slot_frees() -> None:
    scheduler, [instance] = await started(config(max_batch=1))
    await scheduler.infer(seq("a1", 1, start=True))
    waiting = asyncio.create_task(scheduler.infer(seq("b1", 2, start=True)))
    await asyncio.sleep(0.05)
    assert not waiting.done() and scheduler.backlog_length == 1
    assert scheduler.queue_depth == 1  # the backlogged START is pending
    await scheduler.infer(seq("a2", 1, end=True))
    response = await asyncio.wait_for(waiting, timeout=2)
    assert controls(response) == (1, 0.0, True, 2)
    assert scheduler.backlog_length == 0 and scheduler.queue_depth == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_idle_sequence_is_ended_and_its_slot_given_to_the_backlog() -> None:
    scheduler, _ = await started(config(max_batch=1, idle_us=100_000))
    await scheduler.infer(seq("a1", 1, start=True))
    waiting = asyncio.create_task(scheduler.infer(seq("b1", 2, start=True)))
    response = await asyncio.wait_for(waiting, timeout=2)  # after a's idle timeout
    assert controls(response)[3] == 2
    with pytest.raises(ServingError, match="must specify the START flag"):
        await scheduler.infer(seq("a2", 1))
    await scheduler.stop(drain_timeout_s=1)


async def test_string_correlation_ids_with_a_string_corrid_control() -> None:
    scheduler, [instance] = await started(config(corrid="TYPE_STRING"))
    first = await scheduler.infer(seq("a1", "user-7", start=True))
    await scheduler.infer(seq("b1", "user-8", start=True))
    second = await scheduler.infer(seq("b2", "user-8", end=True))
    assert first.outputs["CORRID"][0, 0] == b"user-7"
    assert controls(second)[:3] == (0, 1.0, True)
    null = instance.inputs_seen[-1][0]
    assert null["CORRID"][0, 0] == b""  # the null request's correlation id
    await scheduler.stop(drain_timeout_s=1)


class Accumulator(RecordingInstance):
    """ACC = STATE_IN + IN, and STATE_OUT = ACC: a running sum carried as implicit state."""

    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        results = super().execute(requests)
        for req, res in zip(requests, results, strict=True):
            assert isinstance(res, InferResponse)
            total = req.inputs["STATE_IN"] + req.inputs["IN"]
            res.outputs.pop("STATE_IN", None)
            res.outputs["ACC"] = total
            res.outputs["STATE_OUT"] = total
        return results


async def test_implicit_state_is_carried_between_requests_of_each_sequence() -> None:
    state = (
        'state { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [4] '
        'initial_state { name: "zero" data_type: TYPE_FP32 dims: [4] zero_data: true } }'
    )
    text = config().replace("sequence_batching {", "sequence_batching { " + state)
    scheduler, _ = await started(text, cls=Accumulator)
    sums: dict[int, list[float]] = {1: [], 2: []}
    for step in range(3):
        for corrid, value in ((1, 1.0), (2, 10.0)):
            response = await scheduler.infer(seq(f"{corrid}-{step}", corrid, start=step == 0,
                                                 value=value))  # fmt: skip
            assert "STATE_OUT" not in response.outputs
            sums[corrid].append(float(response.outputs["ACC"][0, 0]))
    assert sums == {1: [1.0, 2.0, 3.0], 2: [10.0, 20.0, 30.0]}
    restarted = await scheduler.infer(seq("again", 1, start=True, value=5.0))
    assert float(restarted.outputs["ACC"][0, 0]) == 5.0  # START resets the state
    await scheduler.stop(drain_timeout_s=1)


async def test_oldest_strategy_batches_oldest_requests_one_per_sequence() -> None:
    strategy = "oldest { max_candidate_sequences: 4 }"
    scheduler, [instance] = await started(config(max_batch=4, strategy=strategy))
    instance.gate = threading.Event()
    held = asyncio.create_task(scheduler.infer(seq("x1", 9, start=True)))
    while not instance.batches:
        await asyncio.sleep(0.002)
    tasks = []
    for rid, corrid, start in (("a1", 1, True), ("a2", 1, False), ("b1", 2, True)):
        tasks.append(asyncio.create_task(scheduler.infer(seq(rid, corrid, start=start))))
        await asyncio.sleep(0.005)
    instance.gate.set()
    responses = await asyncio.gather(held, *tasks)
    assert instance.batches[1:] == [["a1", "b1"], ["a2"]]
    assert [controls(r)[3] for r in responses[1:]] == [1, 1, 2]
    await scheduler.stop(drain_timeout_s=1)


async def test_cancelling_a_queued_request_cancels_the_rest_of_its_sequence() -> None:
    scheduler, [instance] = await started(config(max_batch=1))
    instance.gate = threading.Event()
    first = asyncio.create_task(scheduler.infer(seq("a1", 1, start=True)))
    while not instance.batches:
        await asyncio.sleep(0.002)
    second = asyncio.create_task(scheduler.infer(seq("a2", 1)))
    third = asyncio.create_task(scheduler.infer(seq("a3", 1)))
    await asyncio.sleep(0.01)
    second.cancel()
    await asyncio.sleep(0)
    instance.gate.set()
    assert (await first).id == "a1"
    with pytest.raises(ServingError, match="cancelled"):
        await third
    assert scheduler.statistics.failures_by_reason["CANCELED"] == 2
    assert scheduler.queue_depth == 0 and scheduler.statistics.pending_request_count == 0
    await scheduler.stop(drain_timeout_s=1)


async def test_oldest_strategy_waits_the_queue_delay_for_more_sequences() -> None:
    strategy = "oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 300000 }"
    scheduler, [instance] = await started(config(max_batch=4, strategy=strategy))
    first = asyncio.create_task(scheduler.infer(seq("a1", 1, start=True)))
    await asyncio.sleep(0.03)
    second = asyncio.create_task(scheduler.infer(seq("b1", 2, start=True)))
    await asyncio.gather(first, second)
    assert instance.batches == [["a1", "b1"]]
    assert scheduler.statistics.batch_release_reasons["queue_delay"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_oldest_strategy_sends_a_preferred_size_at_once() -> None:
    strategy = (
        "oldest { max_candidate_sequences: 4 preferred_batch_size: [2] "
        "max_queue_delay_microseconds: 5000000 }"
    )
    scheduler, [instance] = await started(config(max_batch=4, strategy=strategy))
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.gather(*(scheduler.infer(seq(f"s{i}", i, start=True)) for i in (1, 2)))
    assert loop.time() - began < 2 and instance.batches == [["s1", "s2"]]
    assert scheduler.statistics.batch_release_reasons["preferred_size"] == 1
    await scheduler.stop(drain_timeout_s=1)


async def test_direct_strategy_waits_for_minimum_slot_utilization() -> None:
    strategy = "direct { max_queue_delay_microseconds: 2000000 minimum_slot_utilization: 1.0 }"
    text = config(max_batch=2, strategy=strategy, idle_us=10_000_000)
    scheduler, [instance] = await started(text)
    await asyncio.gather(  # both slots ready at once: no waiting
        scheduler.infer(seq("a1", 1, start=True)), scheduler.infer(seq("b1", 2, start=True))
    )
    loop = asyncio.get_running_loop()
    began = loop.time()
    waiting = asyncio.create_task(scheduler.infer(seq("a2", 1)))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # half the slots ready, the config asks for all of them
    await asyncio.gather(waiting, scheduler.infer(seq("b2", 2)))
    assert instance.batches == [["a1", "b1"], ["a2", "b2"]] and loop.time() - began < 1.5
    await scheduler.stop(drain_timeout_s=1)


async def test_word_correlation_id_for_an_integer_corrid_control_is_refused_at_admission() -> None:
    scheduler, _ = await started(config())
    with pytest.raises(ServingError, match="expects an integer correlation ID") as info:
        await scheduler.infer(seq("a1", "abc", start=True))
    assert info.value.code.value == "INVALID_ARG"
    digits = await scheduler.infer(seq("a2", "42", start=True, end=True))
    assert controls(digits)[3] == 42
    await scheduler.stop(drain_timeout_s=1)


async def test_initial_state_can_come_from_a_data_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    (tmp_path / "initial_state").mkdir()
    np.full(4, 100.0, dtype=np.float32).tofile(tmp_path / "initial_state" / "start.bin")
    state = (
        'state { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [4] '
        'initial_state { name: "file" data_type: TYPE_FP32 dims: [4] data_file: "start.bin" } }'
    )
    text = config().replace("sequence_batching {", "sequence_batching { " + state)
    spec = dataclasses.replace(make_spec(text), model_dir=tmp_path)
    scheduler = create_scheduler(
        spec=spec, instances=[Accumulator(spec)], statistics=ModelStatistics("s", 1), server=None
    )
    await scheduler.start()
    first = await scheduler.infer(seq("a1", 1, start=True, value=1.0))
    second = await scheduler.infer(seq("a2", 1, end=True, value=1.0))
    assert float(first.outputs["ACC"][0, 0]) == 101.0
    assert float(second.outputs["ACC"][0, 0]) == 102.0
    await scheduler.stop(drain_timeout_s=1)


def with_parameters(text: str, **parameters: int) -> str:
    entries = " ".join(
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
        for key, value in parameters.items()
    )
    return f"{text} {entries}"


async def test_a_backlogged_sequence_whose_client_left_never_takes_a_slot() -> None:
    scheduler, _ = await started(config(max_batch=1, idle_us=60_000_000))
    await scheduler.infer(seq("a1", 1, start=True))  # holds the only slot, idle for a minute
    abandoned = asyncio.create_task(scheduler.infer(seq("b1", 2, start=True)))
    while scheduler.backlog_length == 0:
        await asyncio.sleep(0.002)
    abandoned.cancel()  # the client disconnects while its START waits for a slot
    with pytest.raises(asyncio.CancelledError):
        await abandoned
    assert scheduler.backlog_length == 0 and scheduler.queue_depth == 0
    await scheduler.infer(seq("a2", 1, end=True))
    assert scheduler.active_sequences == 0  # the freed slot went to nobody
    third = await asyncio.wait_for(scheduler.infer(seq("c1", 3, start=True)), timeout=5)
    assert controls(third)[3] == 3
    await scheduler.stop(drain_timeout_s=1)


async def test_a_slot_handed_over_from_the_backlog_is_freed_by_the_idle_timer() -> None:
    scheduler, _ = await started(config(max_batch=1, idle_us=100_000))
    await scheduler.infer(seq("a1", 1, start=True))
    waited = await asyncio.wait_for(scheduler.infer(seq("b1", 2, start=True)), timeout=5)
    assert controls(waited)[3] == 2
    # b sends nothing more: its idle timer frees the slot for the next sequence.
    third = await asyncio.wait_for(scheduler.infer(seq("c1", 3, start=True)), timeout=5)
    assert controls(third)[3] == 3
    await scheduler.stop(drain_timeout_s=1)


async def test_a_full_backlog_refuses_new_sequences_with_unavailable() -> None:
    text = with_parameters(config(max_batch=1, idle_us=60_000_000), sequence_backlog_size=1)
    scheduler, _ = await started(text)
    await scheduler.infer(seq("a1", 1, start=True))
    waiting = asyncio.create_task(scheduler.infer(seq("b1", 2, start=True)))
    while scheduler.backlog_length == 0:
        await asyncio.sleep(0.002)
    with pytest.raises(ServingError) as info:
        await scheduler.infer(seq("c1", 3, start=True))
    assert info.value.code.value == "UNAVAILABLE"
    assert info.value.message == (
        "inference request for sequence 3 to model 's' was refused: the sequence backlog is "
        "full (1 sequences wait for a slot)"
    )
    assert scheduler.statistics.failures_by_reason["REJECTED"] == 1
    with pytest.raises(ServingError, match="must specify the START flag"):
        await scheduler.infer(seq("c2", 3))  # the refused sequence was never registered
    await scheduler.infer(seq("a2", 1, end=True))
    assert controls(await asyncio.wait_for(waiting, timeout=5))[3] == 2
    await scheduler.stop(drain_timeout_s=1)


def test_the_backlog_bound_defaults_to_sixteen_sequences_per_slot() -> None:
    from serving.schedulers.sequence_backlog import SequenceBacklog

    spec = make_spec(config(max_batch=4))
    backlog: SequenceBacklog[object] = SequenceBacklog(
        spec.config, slot_count=8, on_expired=lambda item: None
    )
    assert (backlog.max_size, backlog.timeout_us) == (128, 60_000_000)


@pytest.mark.parametrize("how", ["backlog_timeout", "request_timeout"])
async def test_a_sequence_waiting_too_long_in_the_backlog_expires(how: str) -> None:
    text = config(max_batch=1, idle_us=60_000_000)
    fields: dict[str, int] = {}
    if how == "backlog_timeout":
        text = with_parameters(text, sequence_backlog_timeout_us=100_000)
    else:
        fields["timeout_us"] = 100_000  # Triton's way: the request's own timeout
    scheduler, _ = await started(text)
    await scheduler.infer(seq("a1", 1, start=True))
    start = request("b1", model="s", sequence_id=2, sequence_start=True, **fields)
    waiting = asyncio.create_task(scheduler.infer(start))
    while scheduler.backlog_length == 0:
        await asyncio.sleep(0.002)
    later = asyncio.create_task(scheduler.infer(seq("b2", 2)))
    for task in (waiting, later):
        with pytest.raises(ServingError) as info:
            await asyncio.wait_for(task, timeout=5)
        assert info.value.code.value == "UNAVAILABLE"
        assert info.value.message == "timeout of the corresponding sequence has been expired"
    assert scheduler.backlog_length == 0 and scheduler.queue_depth == 0
    assert scheduler.statistics.failures_by_reason["REJECTED"] == 2
    assert scheduler.active_sequences == 1  # a still holds its slot; nothing else changed
    await scheduler.stop(drain_timeout_s=1)
