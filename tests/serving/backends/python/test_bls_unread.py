"""A model's decoupled BLS request is bounded like a network client's stream: the responses the
calling model has not taken from its iterator stay within ``--max-unread-response-bytes``, the
target is held back meanwhile, and a caller that takes nothing for
``--unread-response-timeout-secs`` gets an error after what it has not taken while the target's
request is cancelled; a caller that cancels (``ResponseIterator.cancel()``), or drops the
iterator unfinished, ends it at once.
(The network client's side is ``test_decoupled_unread.py``, whose flood model this reuses.)"""

from __future__ import annotations

import json
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from repository import demo_models as dm
from serving.core.streaming import RESPONSE_OVERHEAD_BYTES
from serving.main import ServingProcess
from tests.serving.backends.python.test_decoupled_unread import (
    FLOOD,
    FLOOD_CONFIG,
    HELD_MS,
    LIMIT,
    RESPONSE_BYTES,
    TIMEOUT_S,
    ended_unread,
    report,
)
from tests.serving.harness import serving

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

HURRIED_S = 0.0005  # a wait for the next response
# For "hurried", the flood pauses this long before each of its second to sixth responses, so
# those waits time out however fast the machine (the rest come at full speed, past the limit).
PACED_MS = 50

# IN = [n] asks the flood model for n responses through ``exec(decoupled=True)`` and takes them
# as the parameter "mode" says. "slow": takes the first, then nothing more until the flood's send
# has waited HELD_MS (at most 30 s), then the rest 5 ms apart. "stop": takes the first, then none
# for three times the timeout, then the rest. "cancel": takes the first, cancels the request
# (``ResponseIterator.cancel()``), then takes the rest. "drop": takes the first and returns,
# dropping the iterator unfinished. With the parameter "awaited", the request goes by
# ``await async_exec(decoupled=True)`` and its responses are taken by ``async for``;
# "hurried" (awaited only) asks for a paced flood and takes each response by waits of HURRIED_S
# that time out and are tried again.
# OUT = [responses taken, whether their values came in order, how long the flood's send had
# waited when the caller went on in ms (for "hurried": how many waits timed out)];
# MESSAGE = the error the last one carried ("" if none).
LAG = textwrap.dedent(f"""\
    import asyncio
    import json
    import time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    HELD_MS = {HELD_MS}
    PAUSE_S = {3 * TIMEOUT_S}
    HURRIED_S = {HURRIED_S}
    PACED_MS = {PACED_MS}


    def flood_request(n, **parameters):
        return pb_utils.InferenceRequest(
            model_name="flood", inputs=[pb_utils.Tensor("IN", np.array([n], np.int32))],
            requested_output_names=["OUT"], parameters=parameters)


    def flood(n, **parameters):
        return flood_request(n, **parameters).exec(decoupled=True)


    async def each(responses, awaited):
        if awaited:
            async for response in responses:
                yield response
        else:
            for response in responses:
                yield response


    async def hurried(responses, timeouts):
        # Each response; timeouts[0] counts the waits that timed out.
        while True:
            try:
                response = await asyncio.wait_for(anext(responses, None), HURRIED_S)
            except asyncio.TimeoutError:
                timeouts[0] += 1
                continue
            if response is None:
                return
            yield response


    def send_waited_ms(n):
        [answer] = list(flood(n, waiting=True))
        return int(pb_utils.get_output_tensor_by_name(answer, "OUT").as_numpy()[0])


    class TritonPythonModel:
        async def execute(self, requests):
            return [await self.take(request) for request in requests]

        async def take(self, request):
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            asked = json.loads(request.parameters())
            mode, awaited = asked.get("mode", "slow"), asked.get("awaited")  # warm-up: n = 0
            values, waited, message = [], 0, ""
            if awaited:
                paced = {{"paced_ms": PACED_MS}} if mode == "hurried" else {{}}
                responses = await flood_request(n, **paced).async_exec(decoupled=True)
            else:
                responses = flood(n)
            timeouts = [0]
            if mode == "hurried":
                responses = hurried(responses, timeouts)
            async for response in each(responses, awaited):
                if response.has_error():
                    message = response.error().message()
                    continue
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                values.append(int(out.as_numpy()[0]))
                if len(values) == 1 and mode == "slow":
                    deadline = time.monotonic() + 30
                    while waited < HELD_MS and time.monotonic() < deadline:
                        time.sleep(0.01)
                        waited = send_waited_ms(n)
                elif len(values) == 1 and mode == "cancel":
                    responses.cancel()
                elif len(values) == 1 and mode == "drop":
                    break  # and returns: the iterator goes with this frame
                elif len(values) == 1 and mode == "stop":
                    time.sleep(PAUSE_S)
                if mode == "slow":
                    time.sleep(0.005)
            in_order = int(values == list(range(len(values))))
            waited = timeouts[0] if mode == "hurried" else waited
            return pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([len(values), in_order, waited], np.int32)),
                pb_utils.Tensor("MESSAGE", np.array([message.encode()], dtype=np.object_)),
            ])
""")

LAG_CONFIG = """
backend: "python" max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [1] }
output { name: "OUT" data_type: TYPE_INT32 dims: [3] }
output { name: "MESSAGE" data_type: TYPE_STRING dims: [1] }
instance_group { kind: KIND_CPU }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("bls-unread")
    dm.write_python_model(repo, "flood", FLOOD, FLOOD_CONFIG)
    dm.write_python_model(repo, "lag", LAG, LAG_CONFIG)
    bounds = {"max_unread_response_bytes": LIMIT, "unread_response_timeout_s": TIMEOUT_S}
    with serving(repo, **bounds) as process:
        yield process


def take_through_bls(
    server: ServingProcess, n: int, mode: str, *, awaited: bool = False
) -> tuple[list[int], str]:
    """The lag model's OUT and MESSAGE for a flood of ``n`` taken in ``mode``."""
    body = {
        "inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [n]}],
        "parameters": {"mode": mode, "awaited": awaited},
    }
    url = f"http://{server.http_url}/v2/models/lag/infer"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        outputs: dict[str, Any] = {o["name"]: o["data"] for o in json.load(response)["outputs"]}
    return outputs["OUT"], outputs["MESSAGE"][0]


AWAITED = pytest.mark.parametrize("awaited", [False, True], ids=["exec", "async_exec"])


@AWAITED
def test_a_model_that_takes_its_bls_responses_slowly_holds_the_target_back_and_gets_them_all(
    server: ServingProcess, awaited: bool
) -> None:
    n = 400 + awaited  # 25 MiB in all, six times the limit (each test's flood its own n)
    (taken, in_order, waited_ms), message = take_through_bls(server, n, "slow", awaited=awaited)
    assert message == ""
    assert (taken, in_order) == (n, 1)
    # The flood's send waited for the caller (one takes well under 10 ms when nothing holds it).
    assert waited_ms >= HELD_MS, "the target was never held back while its BLS caller lagged"
    sent, cancelled, longest_ms = report(server, n)
    assert (sent, cancelled) == (n, 0)
    assert longest_ms >= HELD_MS


@AWAITED
def test_a_model_that_stops_taking_its_bls_responses_gets_an_error_and_the_target_stops(
    server: ServingProcess, awaited: bool
) -> None:
    """Awaited, the request is bounded the same way: ``async_exec`` returns at the first
    response, as Triton's does, instead of waiting for all of them."""
    n = 2000 + awaited  # 125 MiB: far past the limit
    before = ended_unread(server)
    (taken, in_order, _), message = take_through_bls(server, n, "stop", awaited=awaited)
    assert in_order == 1
    # What waited for the caller (its bound, a response alone past it), then the error.
    assert LIMIT // (RESPONSE_BYTES + RESPONSE_OVERHEAD_BYTES) <= taken < n // 2
    assert "model 'lag' did not take the responses of its decoupled BLS request" in message
    assert f"limit of {LIMIT} (--max-unread-response-bytes) for {TIMEOUT_S:g} s" in message
    assert_cancelled_early(server, n)
    # Counted as any stream ended for a client that does not read, and once: the target's own
    # stream, held back as long, may reach its end first.
    assert ended_unread(server) == before + 1


def test_a_model_that_cancels_its_bls_request_ends_it_and_the_target_stops(
    server: ServingProcess,
) -> None:
    n = 3000  # 188 MiB: far past the limit
    (taken, in_order, _), message = take_through_bls(server, n, "cancel")
    assert in_order == 1
    # The responses already on their way, then the end: no waiting for a timeout.
    assert taken < n // 2
    assert message == "the request was cancelled by the model that sent it"
    assert_cancelled_early(server, n)


def test_a_model_that_drops_its_bls_iterator_unfinished_ends_the_request_at_once(
    server: ServingProcess,
) -> None:
    n = 3000  # 188 MiB: far past the limit
    before = ended_unread(server)
    (taken, in_order, _), message = take_through_bls(server, n, "drop")
    assert (taken, in_order, message) == (1, 1, "")
    assert_cancelled_early(server, n)
    # Cancelled when dropped, not left to fill the caller's bound and end at the timeout as a
    # caller that lags (which the metrics count).
    assert ended_unread(server) == before


def test_a_model_whose_waits_for_its_bls_responses_time_out_loses_none(
    server: ServingProcess,
) -> None:
    """``asyncio.wait_for`` around ``async for``'s next response: a wait that times out leaves
    the response it was waiting for to the next one, as a cancelled ``anext`` of any async
    iterator should, instead of losing it (and leaving a thread to race the next wait)."""
    n = 300  # 19 MiB: past the limit, so the target is held back and resumed too
    (taken, in_order, timeouts), message = take_through_bls(server, n, "hurried", awaited=True)
    assert timeouts > 0, "no wait timed out: the test did not try what it is about"
    assert (taken, in_order, message) == (n, 1, "")
    sent, cancelled, _ = report(server, n)
    assert (sent, cancelled) == (n, 0)


def assert_cancelled_early(server: ServingProcess, n: int) -> None:
    """The flood of ``n`` saw its request cancelled before it had sent half: it was held back,
    then cancelled, not left to send it all."""
    sent, cancelled, _ = report(server, n)
    assert cancelled == 1
    assert sent < n // 2
