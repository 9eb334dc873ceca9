"""The Python backend: Triton's model.py in its own process, shared memory, crash and restart."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from repository import demo_models
from serving.backends.base import InstancePlacement
from serving.backends.python import shm
from serving.backends.python.instance import PythonInstance
from serving.core.types import InferRequest, InferResponse, RequestedOutput
from serving.errors import ErrorCode, ServingError, UnavailableError

from ..specs import spec_for

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]

CPU = InstancePlacement(name="m_0", kind="KIND_CPU")

PROBE = textwrap.dedent("""\
    import json, os, sys
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.args = args
            if json.loads(args["model_config"])["parameters"].get("fail_init"):
                raise pb_utils.TritonModelException("initialize refused: no weights")

        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                params = json.loads(request.parameters())
                if params.get("crash"):
                    os._exit(3)
                if params.get("hang"):
                    import time; time.sleep(60)
                if params.get("raise"):
                    raise ValueError("execute blew up")
                if params.get("error"):
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                        "bad value", pb_utils.TritonError.INVALID_ARG)))
                    continue
                info = json.dumps({"pid": os.getpid(), "args": self.args,
                                   "corr": request.correlation_id(), "flags": request.flags(),
                                   "requested": request.requested_output_names(),
                                   "module": pb_utils.__name__})
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUTPUT0", x * 2),
                    pb_utils.Tensor("INFO", np.array([info.encode()], dtype=object)),
                ]))
            return responses
""")

PROBE_CONFIG = """
name: "probe" backend: "python" max_batch_size: 0
input { name: "INPUT0" data_type: TYPE_FP32 dims: [-1] }
output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1] }
output { name: "INFO" data_type: TYPE_STRING dims: [1] }
instance_group { kind: KIND_CPU }
parameters { key: "execute_timeout_s" value { string_value: "3" } }
"""


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[PythonInstance]:
    model_dir = demo_models.write_python_model(tmp_path, "probe", PROBE, PROBE_CONFIG)
    instance = PythonInstance(spec_for(model_dir), CPU)
    instance.load()
    yield instance
    instance.unload()


def _request(values: list[float], **parameters: object) -> InferRequest:
    return InferRequest(
        model_name="probe",
        inputs={"INPUT0": np.array(values, dtype=np.float32)},
        parameters=dict(parameters),
    )


def _info(result: object) -> dict[str, object]:
    import json

    assert isinstance(result, InferResponse), result
    return json.loads(result.outputs["INFO"][0])  # type: ignore[no-any-return]


def _wait_healthy(instance: PythonInstance, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not instance.is_healthy():
        assert time.monotonic() < deadline, "instance was not restarted"
        time.sleep(0.05)


def test_add_sub_example_runs_unchanged(tmp_path: Path) -> None:
    instance = PythonInstance(spec_for(demo_models.write_python_add_sub(tmp_path)), CPU)
    instance.load()
    try:
        a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
        (result,) = instance.execute_checked(
            [InferRequest(model_name="add_sub", inputs={"INPUT0": a, "INPUT1": b})]
        )
        assert isinstance(result, InferResponse)
        np.testing.assert_array_equal(result.outputs["OUTPUT0"], a + b)
        np.testing.assert_array_equal(result.outputs["OUTPUT1"], a - b)
    finally:
        instance.unload()


def test_initialize_gets_tritons_args_and_requests_carry_their_fields(
    probe: PythonInstance,
) -> None:
    request = _request([1.0, 2.0])
    request.sequence_id, request.sequence_start = 42, True
    request.outputs = [RequestedOutput(name="INFO")]
    (result,) = probe.execute_checked([request])
    info = _info(result)
    assert list(result.outputs) == ["INFO"]  # type: ignore[union-attr]
    args = info["args"]
    assert isinstance(args, dict)
    assert args["model_instance_kind"] == "CPU" and args["model_instance_name"] == "m_0"
    assert args["model_name"] == "probe" and args["model_version"] == "1"
    assert args["model_instance_device_id"] == "0" and args["model_repository"].endswith("probe")
    assert '"max_batch_size": 0' in args["model_config"]
    assert info["corr"] == 42 and info["flags"] == 1 and info["requested"] == ["INFO"]
    assert str(info["module"]).endswith("triton_python_backend_utils")
    assert info["pid"] != os.getpid()


def test_error_response_fails_only_its_request(probe: PythonInstance) -> None:
    ok1, failed, ok2 = probe.execute_checked(
        [_request([1.0]), _request([2.0], error=True), _request([3.0])]
    )
    assert isinstance(ok1, InferResponse) and ok1.outputs["OUTPUT0"].tolist() == [2.0]
    assert isinstance(ok2, InferResponse) and ok2.outputs["OUTPUT0"].tolist() == [6.0]
    assert isinstance(failed, ServingError) and failed.code is ErrorCode.INVALID_ARG
    assert failed.message == "bad value"


def test_exception_in_execute_fails_the_call_and_instance_keeps_serving(
    probe: PythonInstance,
) -> None:
    results = probe.execute_checked([_request([1.0]), _request([2.0], **{"raise": True})])
    assert all(isinstance(r, ServingError) for r in results)
    assert "execute blew up" in str(results[0])
    assert isinstance(probe.execute_checked([_request([1.0])])[0], InferResponse)


def test_crash_fails_in_flight_requests_and_the_process_is_restarted(
    probe: PythonInstance,
) -> None:
    # NOTE: the server's view of the pid: inside its own PID namespace the model is always pid 2.
    first_pid = probe.pid
    results = probe.execute_checked([_request([1.0], crash=True), _request([2.0])])
    for result in results:
        assert isinstance(result, UnavailableError)
        assert (
            "stopped while executing" in result.message and "exited with code 3" in result.message
        )
    _wait_healthy(probe)
    assert probe.restart_count == 1 and "exited with code 3" in probe.last_error
    assert isinstance(probe.execute_checked([_request([1.0])])[0], InferResponse)
    assert probe.pid != first_pid


def test_process_killed_while_idle_is_detected_and_restarted(probe: PythonInstance) -> None:
    pid = probe.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while probe.restart_count == 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    _wait_healthy(probe)
    assert "signal 9" in probe.last_error
    assert isinstance(probe.execute_checked([_request([1.0])])[0], InferResponse)


def test_execute_timeout_kills_and_restarts_the_process(probe: PythonInstance) -> None:
    started = time.monotonic()
    (result,) = probe.execute_checked([_request([1.0], hang=True)])
    assert time.monotonic() - started < 30
    assert isinstance(result, UnavailableError) and "timed out after 3 s" in result.message
    _wait_healthy(probe)
    assert isinstance(probe.execute_checked([_request([1.0])])[0], InferResponse)


def test_bad_request_fails_alone(probe: PythonInstance) -> None:
    bad = InferRequest(model_name="probe", inputs={"INPUT0": np.ones(2, np.int32)})
    good, failed = probe.execute_checked([_request([1.0]), bad])
    assert isinstance(good, InferResponse)
    assert isinstance(failed, ServingError) and failed.code is ErrorCode.INVALID_ARG


def test_bytes_in_and_out_through_shared_memory(tmp_path: Path) -> None:
    instance = PythonInstance(spec_for(demo_models.write_python_identity(tmp_path)), CPU)
    instance.load()
    try:
        data = np.array([[b"a", b"\x00\xffbin"], [b"", "é".encode()]], dtype=object)
        big = np.array([[b"x" * 3_000_000]], dtype=object)  # grows both regions
        results = instance.execute_checked(
            [
                InferRequest(model_name="string_identity", inputs={"INPUT0": data}),
                InferRequest(model_name="string_identity", inputs={"INPUT0": big}),
            ]
        )
        assert isinstance(results[0], InferResponse) and isinstance(results[1], InferResponse)
        assert results[0].outputs["OUTPUT0"].tolist() == data.tolist()
        assert results[1].outputs["OUTPUT0"].tolist() == big.tolist()
    finally:
        instance.unload()


def test_unload_releases_every_shared_memory_segment(probe: PythonInstance) -> None:
    probe.execute_checked([_request(list(range(1000)))])
    assert shm.leftover(probe.shm_prefix), "segments exist while loaded"
    probe.unload()
    assert shm.leftover(probe.shm_prefix) == []
    assert not probe.is_healthy()


def test_crash_leftovers_are_unlinked(probe: PythonInstance) -> None:
    probe.execute_checked([_request([1.0])])
    probe.execute_checked([_request([1.0], crash=True)])
    _wait_healthy(probe)
    assert [n for n in shm.leftover(probe.shm_prefix) if n.startswith(probe.shm_prefix + "o")] == []


def test_initialize_error_fails_the_load_with_its_text(tmp_path: Path) -> None:
    config = PROBE_CONFIG + 'parameters { key: "fail_init" value { string_value: "1" } }'
    model_dir = demo_models.write_python_model(tmp_path, "probe", PROBE, config)
    instance = PythonInstance(spec_for(model_dir), CPU)
    with pytest.raises(UnavailableError, match="initialize refused: no weights"):
        instance.load()
    assert shm.leftover(instance.shm_prefix) == []


def test_syntax_error_in_model_py_fails_the_load(tmp_path: Path) -> None:
    model_dir = demo_models.write_python_model(tmp_path, "probe", "def broken(:\n", PROBE_CONFIG)
    with pytest.raises(UnavailableError, match="SyntaxError"):
        PythonInstance(spec_for(model_dir), CPU).load()


def test_unload_after_a_failed_load_is_harmless(tmp_path: Path) -> None:
    model_dir = demo_models.write_python_model(
        tmp_path, "probe", "raise SystemExit(2)\n", PROBE_CONFIG
    )
    instance = PythonInstance(spec_for(model_dir), CPU)
    with pytest.raises(UnavailableError):
        instance.load()
    instance.unload()
    PythonInstance(spec_for(model_dir), CPU).unload()


ASYNC_MODEL = textwrap.dedent("""\
    import asyncio
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        async def execute(self, requests):
            await asyncio.sleep(0)
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                    pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() + 1)])
                    for r in requests]

        def is_ready(self):
            return False
""")


def test_async_execute_and_is_ready_are_honoured(tmp_path: Path) -> None:
    config = 'name: "a" backend: "python" input { name: "INPUT0" data_type: TYPE_FP32 dims: [1] }'
    config += ' output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [1] }'
    instance = PythonInstance(
        spec_for(demo_models.write_python_model(tmp_path, "a", ASYNC_MODEL, config)), CPU
    )
    instance.load()
    try:
        request = InferRequest(model_name="a", inputs={"INPUT0": np.zeros(1, np.float32)})
        (result,) = instance.execute_checked([request])
        assert isinstance(result, InferResponse) and result.outputs["OUTPUT0"].tolist() == [1.0]
        assert instance.is_healthy() and not instance.model_is_ready()
    finally:
        instance.unload()
