"""A streamed request's responses waiting for its client are bounded
(``--max-unread-response-bytes``): past the limit the request ends with an error after what
already waits, and the model is told the request was cancelled. The whole path (a real model, a
client that stops reading) is in ``tests/serving/backends/python/test_decoupled_unread.py``."""

from __future__ import annotations

import argparse
import asyncio

import numpy as np
import pytest

from serving.cli import add_arguments, settings_from_args
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


def response(value: int, nbytes: int = KiB) -> InferResponse:
    return InferResponse("flood", 1, {"OUT": np.full(nbytes, value % 256, dtype=np.uint8)})


async def settle() -> None:
    """Let the loop run what ``put`` scheduled from this (the loop's own) thread."""
    for _ in range(3):
        await asyncio.sleep(0)


async def read_all(stream: ResponseStream) -> list[StreamItem]:
    return [item async for item in stream.items()]


async def test_responses_past_the_limit_end_the_request_after_those_waiting() -> None:
    unread = UnreadResponses(limit=4 * (KiB + RESPONSE_OVERHEAD_BYTES))
    stream = ResponseStream(unread, "flood")
    cancels: list[bool] = []
    stream.on_cancel = lambda: cancels.append(True)
    for value in range(10):
        stream.put(response(value), final=False)
    stream.put(None, final=True)
    await settle()

    assert stream.waiting_bytes == 4 * (KiB + RESPONSE_OVERHEAD_BYTES)
    assert cancels == [True] and stream.cancelled  # the model is told at once, not on reading
    assert unread.ended == 1
    items = await read_all(stream)
    assert [item.outputs["OUT"][0] for item, _ in items[:4]] == [0, 1, 2, 3]  # type: ignore[union-attr]
    error, final = items[4]
    assert len(items) == 5 and final
    assert isinstance(error, ServingError) and error.code is ErrorCode.UNAVAILABLE
    assert "model 'flood' did not read its responses" in error.message
    assert f"limit of {unread.limit} (--max-unread-response-bytes)" in error.message
    assert stream.waiting_bytes == 0


async def test_a_client_that_keeps_up_gets_every_response_whatever_the_total() -> None:
    unread = UnreadResponses(limit=2 * KiB)
    stream = ResponseStream(unread, "flood")
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
    assert unread.ended == 0 and not stream.cancelled


async def test_a_response_larger_than_the_limit_goes_when_nothing_else_waits() -> None:
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
    for value in range(1000):
        stream.put(response(value, nbytes=1), final=False)
    await settle()
    assert unread.ended == 1
    items = await read_all(stream)
    assert len(items) == 100  # 99 responses of 513 bytes each, then the error
    assert isinstance(items[-1][0], ServingError) and items[-1][1]


async def test_with_no_limit_everything_waits_and_nothing_is_counted() -> None:
    unread = UnreadResponses(limit=0)
    stream = ResponseStream(unread, "flood")
    for value in range(100):
        stream.put(response(value, nbytes=64 * KiB), final=False)
    stream.put(None, final=True)
    await settle()
    assert stream.waiting_bytes == 0
    assert len(await read_all(stream)) == 101 and unread.ended == 0


async def test_nothing_after_the_final_item_is_kept() -> None:
    stream = ResponseStream(UnreadResponses(limit=64 * KiB), "flood")
    stream.put(None, final=True)
    stream.put(response(1), final=False)  # a late response: never read, so never held
    await settle()
    assert stream.waiting_bytes == RESPONSE_OVERHEAD_BYTES  # the final item alone
    assert await read_all(stream) == [(None, True)]


async def test_the_model_is_told_once_when_the_client_also_leaves() -> None:
    stream = ResponseStream(UnreadResponses(limit=KiB), "flood")
    cancels: list[bool] = []
    stream.on_cancel = lambda: cancels.append(True)
    for value in range(3):
        stream.put(response(value), final=False)
    await settle()
    stream.cancel()  # what ``infer_stream`` does when its client goes before the final item
    assert cancels == [True]


def test_the_limit_defaults_to_the_largest_request_and_is_never_negative() -> None:
    settings = ServingSettings(model_repository="/models")
    assert settings.max_unread_response_bytes == settings.max_request_bytes == 64 * KiB * KiB
    with pytest.raises(ValueError, match="--max-unread-response-bytes: must not be negative"):
        ServingSettings(model_repository="/models", max_unread_response_bytes=-1)


def test_the_limit_comes_from_its_flag_or_its_variable() -> None:
    env = {"SERVING_MODEL_REPOSITORY": "/models", "SERVING_MAX_UNREAD_RESPONSE_BYTES": "0"}
    assert settings_from_env(env).max_unread_response_bytes == 0
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = parser.parse_args(
        ["--model-repository", "/models", "--max-unread-response-bytes", str(KiB * KiB)]
    )
    assert settings_from_args(vars(options)).max_unread_response_bytes == KiB * KiB
