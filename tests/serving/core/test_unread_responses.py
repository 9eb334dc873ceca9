"""A streamed request's responses waiting for its client are bounded
(``--max-unread-response-bytes``): past the limit the model is held back until the client has
read half of what waits; a client that has not within ``--unread-response-timeout-secs``, or a
model that goes on to twice the limit, ends the request with an error after what already waits,
and the model is told the request was cancelled. With a replica budget of request bytes, what
waits counts in it until it is read or the stream is closed. The whole path (a real model, a
client that stops reading) is in ``tests/serving/backends/python/test_decoupled_unread.py``."""

from __future__ import annotations

import argparse
import asyncio

import numpy as np
import pytest

from serving.cli import add_arguments, settings_from_args
from serving.core.request_bytes import RequestBytesBudget
from serving.core.streaming import (
    RESPONSE_OVERHEAD_BYTES,
    ResponseStream,
    StreamItem,
    UnreadResponses,
)
from serving.core.types import InferResponse
from serving.errors import ErrorCode, ServingError
from serving.settings import ServingSettings, settings_from_env

KiB = 1024
ONE = KiB + RESPONSE_OVERHEAD_BYTES  # what one test response counts while it waits


def response(value: int, nbytes: int = KiB) -> InferResponse:
    return InferResponse("flood", 1, {"OUT": np.full(nbytes, value % 256, dtype=np.uint8)})


async def settle() -> None:
    """Let the loop run what ``put`` scheduled from this (the loop's own) thread."""
    for _ in range(3):
        await asyncio.sleep(0)


async def read_all(stream: ResponseStream) -> list[StreamItem]:
    return [item async for item in stream.items()]


class Model:
    """What a backend hears from the stream: hold-backs and cancels, in order."""

    def __init__(self, stream: ResponseStream) -> None:
        self.heard: list[str] = []
        stream.on_flow = lambda held: self.heard.append("hold" if held else "go")
        stream.on_cancel = lambda: self.heard.append("cancel")


def assert_ended(item: StreamItem, *phrases: str) -> None:
    error, final = item
    assert final and isinstance(error, ServingError) and error.code is ErrorCode.UNAVAILABLE
    assert "the client of a streamed request for model 'flood' did not read" in error.message
    for phrase in phrases:
        assert phrase in error.message


async def test_past_the_limit_the_model_is_held_back_until_half_is_read() -> None:
    unread = UnreadResponses(limit=4 * ONE, timeout_s=60)
    stream = ResponseStream(unread, "flood")
    model = Model(stream)
    for value in range(6):  # the fifth passes the limit; a sixth raced the hold-back
        stream.put(response(value), final=False)
    await settle()
    assert model.heard == ["hold"] and stream.held_back
    assert stream.waiting_bytes == 6 * ONE

    items = stream.items()
    taken = [await anext(items) for _ in range(3)]
    assert model.heard == ["hold"]  # 3 waiting: more than half the limit
    taken.append(await anext(items))
    assert model.heard == ["hold", "go"] and not stream.held_back  # 2 waiting: half
    stream.put(None, final=True)
    await settle()
    rest = [item async for item in items]
    values = [item.outputs["OUT"][0] for item, _ in taken + rest[:2]]  # type: ignore[union-attr]
    assert values == [0, 1, 2, 3, 4, 5] and rest[2] == (None, True)
    assert unread.ended == 0 and not stream.cancelled


async def test_a_model_that_goes_on_to_twice_the_limit_ends_its_request() -> None:
    unread = UnreadResponses(limit=4 * ONE, timeout_s=60)
    stream = ResponseStream(unread, "flood")
    model = Model(stream)
    for value in range(10):  # ignoring the hold-back: the ninth would pass twice the limit
        stream.put(response(value), final=False)
    stream.put(None, final=True)
    await settle()
    assert model.heard == ["hold", "cancel"] and unread.ended == 1
    items = await read_all(stream)
    assert [item.outputs["OUT"][0] for item, _ in items[:8]] == list(range(8))  # type: ignore[union-attr]
    assert len(items) == 9
    assert_ended(items[8], f"would pass twice the limit of {4 * ONE}")
    assert stream.waiting_bytes == 0


async def test_a_stream_held_back_for_the_timeout_ends() -> None:
    unread = UnreadResponses(limit=2 * ONE, timeout_s=0.2)
    stream = ResponseStream(unread, "flood")
    model = Model(stream)
    for value in range(3):
        stream.put(response(value), final=False)
    await settle()
    assert model.heard == ["hold"]
    await asyncio.sleep(0.5)
    assert model.heard == ["hold", "cancel"] and stream.cancelled and unread.ended == 1
    items = await read_all(stream)
    assert len(items) == 4  # every response that waited, then the error
    assert_ended(items[3], f"they waited past the limit of {2 * ONE} (--max-unread-response-"
                           "bytes) for 0.2 s (--unread-response-timeout-secs)")  # fmt: skip


async def test_a_client_that_reads_half_within_the_timeout_keeps_its_stream() -> None:
    unread = UnreadResponses(limit=20 * ONE, timeout_s=2)
    stream = ResponseStream(unread, "flood")
    model = Model(stream)
    for value in range(30):  # past the limit, within twice it
        stream.put(response(value), final=False)
    stream.put(None, final=True)
    await settle()
    assert model.heard == ["hold"]
    received = []
    async for item, _ in stream.items():  # one every 10 ms: half of it within 0.2 s
        if item is not None:
            received.append(int(item.outputs["OUT"][0]))  # type: ignore[union-attr]
        await asyncio.sleep(0.01)
    assert received == list(range(30))
    assert model.heard == ["hold", "go"] and unread.ended == 0


async def test_a_client_that_keeps_up_never_holds_the_model_back() -> None:
    unread = UnreadResponses(limit=2 * KiB)
    stream = ResponseStream(unread, "flood")
    model = Model(stream)
    received: list[int] = []

    async def reader() -> None:
        async for item, _ in stream.items():
            if item is not None:
                received.append(int(item.outputs["OUT"][0]))  # type: ignore[union-attr]

    task = asyncio.create_task(reader())
    for value in range(50):  # 50 KiB in all, never more than one waiting
        stream.put(response(value), final=False)
        await settle()
    stream.put(None, final=True)
    await asyncio.wait_for(task, 5)
    assert received == [value % 256 for value in range(50)]
    assert model.heard == [] and unread.ended == 0


async def test_a_response_larger_than_twice_the_limit_goes_when_nothing_else_waits() -> None:
    unread = UnreadResponses(limit=KiB)
    stream = ResponseStream(unread, "flood")
    stream.put(response(1, nbytes=64 * KiB), final=True)
    await settle()
    items = await read_all(stream)
    assert len(items) == 1 and isinstance(items[0][0], InferResponse) and items[0][1]
    assert unread.ended == 0


async def test_tiny_responses_are_bounded_by_their_count_too() -> None:
    unread = UnreadResponses(limit=100 * RESPONSE_OVERHEAD_BYTES)
    stream = ResponseStream(unread, "tokens")
    model = Model(stream)
    for value in range(1000):
        stream.put(response(value, nbytes=1), final=False)
    await settle()
    assert model.heard == ["hold", "cancel"] and unread.ended == 1
    items = await read_all(stream)
    assert len(items) == 200  # 199 responses of 513 bytes each, then the error
    assert isinstance(items[-1][0], ServingError) and items[-1][1]


async def test_with_no_limit_everything_waits_and_nothing_is_counted() -> None:
    unread = UnreadResponses(limit=0)
    stream = ResponseStream(unread, "flood")
    model = Model(stream)
    for value in range(100):
        stream.put(response(value, nbytes=64 * KiB), final=False)
    stream.put(None, final=True)
    await settle()
    assert stream.waiting_bytes == 0 and model.heard == []
    assert len(await read_all(stream)) == 101 and unread.ended == 0


async def test_nothing_after_the_final_item_is_kept_and_a_finished_model_is_not_timed() -> None:
    unread = UnreadResponses(limit=ONE, timeout_s=0.1)
    stream = ResponseStream(unread, "flood")
    model = Model(stream)
    stream.put(response(0), final=False)
    stream.put(response(1), final=False)  # held back
    stream.put(None, final=True)
    stream.put(response(2), final=False)  # a late response: never read, so never held
    await settle()
    assert stream.waiting_bytes == 2 * ONE + RESPONSE_OVERHEAD_BYTES
    await asyncio.sleep(0.3)  # the model is done: its client may take its time
    assert model.heard == ["hold"] and unread.ended == 0
    assert len(await read_all(stream)) == 3


async def test_the_model_is_told_once_when_the_client_also_leaves() -> None:
    stream = ResponseStream(UnreadResponses(limit=KiB), "flood")
    model = Model(stream)
    for value in range(5):
        stream.put(response(value), final=False)
    await settle()
    stream.cancel()  # what ``infer_stream`` does when its client goes before the final item
    assert model.heard == ["hold", "cancel"]


async def test_a_request_ended_for_two_reasons_or_after_its_client_left_is_counted_once() -> None:
    unread = UnreadResponses(limit=4 * ONE)
    stream = ResponseStream(unread, "flood")
    model = Model(stream)
    stream.put(response(0), final=False)
    await settle()
    stream.end_unread("a BLS caller took none")  # what a lagging BLS caller's bridge does
    stream.end_unread("held back for the timeout")  # the stream's own stall, after it
    assert unread.ended == 1 and model.heard == ["cancel"]
    items = await read_all(stream)
    assert len(items) == 2
    assert_ended(items[1], "a BLS caller took none")
    gone = ResponseStream(unread, "flood")
    gone.cancel()  # its client left: not a client that does not read
    gone.end_unread("held back for the timeout")
    assert unread.ended == 1


async def test_what_waits_counts_in_the_replica_budget_until_it_is_read() -> None:
    budget = RequestBytesBudget(limit=2 * ONE)  # never refuses what exists: only new requests
    stream = ResponseStream(UnreadResponses(limit=0), "flood", budget)  # counted with no limit
    for value in range(5):
        stream.put(response(value), final=False)
    stream.put(None, final=True)
    await settle()
    assert budget.held == stream.budget_bytes == 5 * ONE + RESPONSE_OVERHEAD_BYTES
    items = stream.items()
    await anext(items)
    await anext(items)
    assert budget.held == 3 * ONE + RESPONSE_OVERHEAD_BYTES
    assert len([item async for item in items]) == 4 and budget.held == 0
    stream.close()
    assert budget.held == 0


async def test_closing_a_stream_gives_back_what_still_waits_and_counts_nothing_after() -> None:
    budget = RequestBytesBudget(limit=KiB)
    stream = ResponseStream(UnreadResponses(limit=4 * ONE, timeout_s=60), "flood", budget)
    model = Model(stream)
    for value in range(6):
        stream.put(response(value), final=False)
    await settle()
    await anext(stream.items())
    assert budget.held == 5 * ONE and model.heard == ["hold"]
    stream.cancel()  # the client left: ``infer_stream`` cancels, then closes
    stream.close()
    assert budget.held == stream.budget_bytes == 0
    stream.put(response(6), final=False)  # a model that has not yet seen the cancel
    await settle()
    assert budget.held == 0
    stream.close()  # twice is harmless
    assert budget.held == 0


async def test_with_no_budget_nothing_is_held_in_one() -> None:
    budget = RequestBytesBudget(limit=0)
    stream = ResponseStream(UnreadResponses(limit=0), "flood", budget)
    stream.put(response(0), final=True)
    await settle()
    assert budget.held == stream.budget_bytes == stream.waiting_bytes == 0
    assert len(await read_all(stream)) == 1


def test_the_defaults_and_what_is_refused() -> None:
    settings = ServingSettings(model_repository="/models")
    assert settings.max_unread_response_bytes == settings.max_request_bytes == 64 * KiB * KiB
    assert settings.unread_response_timeout_s == 60
    with pytest.raises(ValueError, match="--max-unread-response-bytes: must not be negative"):
        ServingSettings(model_repository="/models", max_unread_response_bytes=-1)
    with pytest.raises(ValueError, match="--unread-response-timeout-secs: must be positive"):
        ServingSettings(model_repository="/models", unread_response_timeout_s=0)


def test_the_bounds_come_from_their_flags_or_their_variables() -> None:
    env = {
        "SERVING_MODEL_REPOSITORY": "/models",
        "SERVING_MAX_UNREAD_RESPONSE_BYTES": "0",
        "SERVING_UNREAD_RESPONSE_TIMEOUT_SECS": "2.5",
    }
    from_env = settings_from_env(env)
    assert from_env.max_unread_response_bytes == 0 and from_env.unread_response_timeout_s == 2.5
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = parser.parse_args(["--model-repository", "/models",
                                 "--max-unread-response-bytes", str(KiB * KiB),
                                 "--unread-response-timeout-secs", "5"])  # fmt: skip
    from_args = settings_from_args(vars(options))
    assert from_args.max_unread_response_bytes == KiB * KiB
    assert from_args.unread_response_timeout_s == 5
