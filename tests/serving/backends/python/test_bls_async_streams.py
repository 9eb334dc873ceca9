"""An ``async def execute`` reading many decoupled BLS requests at once with ``async for``: the
waits take no thread, so the model's event loop and its executor stay free meanwhile, and every
response reaches its reader. (The bounds on such requests are ``test_bls_unread.py``.)"""

from __future__ import annotations

import json
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.harness import serving

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

STREAMS = 40  # more than any default executor's threads (at most 32)
LATER_MS = 3000  # how long each target waits before it answers

# Decoupled: IN = [ms, i] answers OUT = [i] after ms milliseconds (from a thread), then final,
# noting whether its request was cancelled by then; with the parameter "report", IN = [ms, i]
# waits for request i's note (at most ms) and answers it: OUT = [1 cancelled, 0 not, -1 none].
LATER = textwrap.dedent("""\
    import json
    import threading
    import time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


    class TritonPythonModel:
        def initialize(self, args):
            self.noted = threading.Condition()
            self.cancelled = {}  # i: whether request i was cancelled when it woke

        def execute(self, requests):
            for request in requests:
                ms, i = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().tolist()
                sender = request.get_response_sender()
                work = self.report if json.loads(request.parameters()).get("report") else self.later
                threading.Thread(target=work, args=(sender, ms, i)).start()
            return None

        def later(self, sender, ms, i):
            time.sleep(ms / 1000)
            with self.noted:
                self.cancelled[i] = int(sender.is_cancelled())
                self.noted.notify_all()
            out = pb_utils.Tensor("OUT", np.array([i], np.int32))
            sender.send(pb_utils.InferenceResponse([out]), flags=FINAL)

        def report(self, sender, ms, i):
            with self.noted:
                self.noted.wait_for(lambda: i in self.cancelled, ms / 1000)
            out = pb_utils.Tensor("OUT", np.array([self.cancelled.get(i, -1)], np.int32))
            sender.send(pb_utils.InferenceResponse([out]), flags=FINAL)
""")

LATER_CONFIG = """
backend: "python" max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [2] }
output { name: "OUT" data_type: TYPE_INT32 dims: [1] }
instance_group { kind: KIND_CPU }
model_transaction_policy { decoupled: true }
"""

# IN = [n, ms]: sends n decoupled requests to ``later`` (each answering after ms), reads them all
# at once with ``async for``, and while they wait asks its loop's executor for one small job.
# OUT = [whether that job ran within 1.5 s, then every value read, sorted].
# With the parameter "give_up", IN = [i, ms]: awaits ``async_exec(decoupled=True)`` of request i
# (answering after ms) for at most 0.3 s; OUT = [1 if that wait timed out]. With "report",
# ``later``'s report on request i (waiting at most ms).
FAN_OUT = textwrap.dedent("""\
    import asyncio
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils


    def later_request(ms, i, **parameters):
        return pb_utils.InferenceRequest(
            model_name="later", inputs=[pb_utils.Tensor("IN", np.array([ms, i], np.int32))],
            requested_output_names=["OUT"], parameters=parameters)


    def later(ms, i):
        return later_request(ms, i).exec(decoupled=True)


    async def give_up(i, ms):
        try:
            await asyncio.wait_for(later_request(ms, i).async_exec(decoupled=True), 0.3)
        except asyncio.TimeoutError:
            return [1]
        return [0]


    async def report(i, ms):
        [response] = list(later_request(ms, i, report=True).exec(decoupled=True))
        return pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy().tolist()


    async def read(responses):
        values = []
        async for response in responses:
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            values.append(int(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0]))
        return values


    class TritonPythonModel:
        async def execute(self, requests):
            return [await self.fan_out(request) for request in requests]

        async def fan_out(self, request):
            n, ms = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().tolist()
            asked = json.loads(request.parameters())
            if asked.get("give_up") or asked.get("report"):
                out = await (give_up(n, ms) if asked.get("give_up") else report(n, ms))
                return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array(out, np.int32))])
            readers = [asyncio.ensure_future(read(later(ms, i))) for i in range(n)]
            await asyncio.sleep(0.2)  # every reader is waiting for its first response
            loop = asyncio.get_running_loop()
            try:
                await asyncio.wait_for(loop.run_in_executor(None, int), 1.5)
                executor_free = 1
            except asyncio.TimeoutError:
                executor_free = 0
            values = sorted(v for values in await asyncio.gather(*readers) for v in values)
            return pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([executor_free, *values], np.int32))])
""")

FAN_OUT_CONFIG = """
backend: "python" max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [2] }
output { name: "OUT" data_type: TYPE_INT32 dims: [-1] }
instance_group { kind: KIND_CPU }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("bls-async")
    dm.write_python_model(repo, "later", LATER, LATER_CONFIG)
    dm.write_python_model(repo, "fan_out", FAN_OUT, FAN_OUT_CONFIG)
    with serving(repo) as process:
        yield process


def fan_out(server: ServingProcess, n: int, ms: int, **parameters: bool) -> list[int]:
    body = {
        "inputs": [{"name": "IN", "shape": [2], "datatype": "INT32", "data": [n, ms]}],
        "parameters": parameters,
    }
    url = f"http://{server.http_url}/v2/models/fan_out/infer"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        outputs: dict[str, Any] = {o["name"]: o["data"] for o in json.load(response)["outputs"]}
    return list(outputs["OUT"])


def test_many_async_for_readers_of_bls_streams_take_no_thread_and_get_every_response(
    server: ServingProcess,
) -> None:
    executor_free, *values = fan_out(server, STREAMS, LATER_MS)
    assert values == list(range(STREAMS))
    # While 40 readers waited 3 s for their targets, a job given to the loop's executor ran
    # at once: no reader was holding one of its threads.
    assert executor_free == 1, "the loop's executor was busy with the readers' waits"


def test_a_model_that_gives_up_awaiting_its_first_bls_response_cancels_the_request(
    server: ServingProcess,
) -> None:
    """``asyncio.wait_for`` around ``await async_exec(decoupled=True)`` timing out before the
    first response: the iterator goes with the cancelled wait and its request is cancelled then,
    so the target sees it cancelled when it wakes (no thread kept the iterator until the first
    response came)."""
    i = 1000  # each request its own i (the fan-out above uses 0 to 39)
    assert fan_out(server, i, LATER_MS, give_up=True) == [1]
    assert fan_out(server, i, 2 * LATER_MS, report=True) == [1]
