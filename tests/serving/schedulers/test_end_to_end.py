"""Scheduling through the real HTTP and gRPC front ends, checked with ``tritonclient``.

One serving process holds Python models that sleep a configured time (``PYTHON_SLEEP`` reports the
batch size it executed), a Python accumulator driven by the sequence batcher, and an ensemble; each
test reads the outcome from the responses, the statistics extension and the metrics port.
"""

from __future__ import annotations

import re
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.harness import serving

pytestmark = pytest.mark.embedded

ACCUMULATE = textwrap.dedent('''\
    """OUTPUT = running sum of INPUT over the sequence, kept as implicit state (STATE_IN/OUT)."""
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                def get(name):
                    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                total = (get("STATE_IN") + get("INPUT")) * get("READY")
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUTPUT", total.astype(np.int32)),
                    pb_utils.Tensor("STATE_OUT", total.astype(np.int32)),
                    pb_utils.Tensor("CORR", get("CORRID").astype(np.uint64)),
                    pb_utils.Tensor("FIRST", get("START").astype(np.int32)),
                ]))
            return responses
''')

REFUSE_NEGATIVE = textwrap.dedent('''\
    """Echoes INPUT0 to OUTPUT0; a request with a negative value fails with an error response."""
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                if (x < 0).any():
                    error = pb_utils.TritonError("negative input refused")
                    responses.append(pb_utils.InferenceResponse(error=error))
                else:
                    responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
            return responses
''')

REFUSE_NEGATIVE_CONFIG = """
backend: "python" max_batch_size: 8
input { name: "INPUT0" data_type: TYPE_FP32 dims: [4] }
output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }
instance_group { kind: KIND_CPU count: 1 }
"""

ACCUMULATE_CONFIG = """
backend: "python" max_batch_size: 2
input { name: "INPUT" data_type: TYPE_INT32 dims: [1] }
output { name: "OUTPUT" data_type: TYPE_INT32 dims: [1] }
output { name: "CORR" data_type: TYPE_UINT64 dims: [1] }
output { name: "FIRST" data_type: TYPE_INT32 dims: [1] }
instance_group { kind: KIND_CPU count: 1 }
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input { name: "START"
    control { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } }
  control_input { name: "READY"
    control { kind: CONTROL_SEQUENCE_READY int32_false_true: [0, 1] } }
  control_input { name: "CORRID"
    control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } }
  state { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [1]
    initial_state { name: "zero" data_type: TYPE_INT32 dims: [1] zero_data: true } }
}
"""


def sleep_model(repo: Path, name: str, batching: str, *, delay_ms: int, max_batch: int) -> None:
    text = dm.python_sleep_config(
        name, max_batch_size=max_batch, dims=(4,), execute_delay_ms=delay_ms
    )
    cfg = text_format.Parse(text, mc.ModelConfig())
    cfg.ClearField("dynamic_batching")
    text_format.Merge(f"dynamic_batching {{ {batching} }}", cfg)
    dm.write_python_model(repo, name, dm.PYTHON_SLEEP, str(text_format.MessageToString(cfg)))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo = tmp_path_factory.mktemp("scheduling")
    sleep_model(
        repo, "batcher", "preferred_batch_size: [4] max_queue_delay_microseconds: 1000000",
        delay_ms=0, max_batch=8,
    )  # fmt: skip
    sleep_model(
        repo, "bounded",
        "default_queue_policy { max_queue_size: 1 default_timeout_microseconds: 10000000 "
        "allow_timeout_override: true }",
        delay_ms=400, max_batch=1,
    )  # fmt: skip
    sleep_model(
        repo, "prioritized", "priority_levels: 2 default_priority_level: 2",
        delay_ms=300, max_batch=1,
    )  # fmt: skip
    sleep_model(
        repo, "delayed",
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 2000000 }",
        delay_ms=0, max_batch=1,
    )  # fmt: skip
    sleep_model(repo, "ordered", "preserve_ordering: true", delay_ms=0, max_batch=1)
    _set_instances(repo / "ordered", 2)
    dm.write_python_model(repo, "accumulate", ACCUMULATE, ACCUMULATE_CONFIG)
    one_slot = ACCUMULATE_CONFIG.replace("max_batch_size: 2", "max_batch_size: 1").replace(
        "max_sequence_idle_microseconds: 5000000", "max_sequence_idle_microseconds: 300000"
    )
    dm.write_python_model(repo, "accumulate_one", ACCUMULATE, one_slot)
    dm.write_python_model(repo, "refuse_negative", REFUSE_NEGATIVE, REFUSE_NEGATIVE_CONFIG)
    dm.write_onnx_identity(repo, "first", dims=(4,), max_batch_size=8)
    dm.write_onnx_identity(repo, "second", dims=(4,), max_batch_size=8)
    tensor = dm.TensorDecl
    dm.write_ensemble(
        repo, "chain",
        [dm.EnsembleStep("first", {"INPUT0": "IN"}, {"OUTPUT0": "middle"}),
         dm.EnsembleStep("second", {"INPUT0": "middle"}, {"OUTPUT0": "OUT"})],
        inputs=[tensor("IN", "FP32", (4,))], outputs=[tensor("OUT", "FP32", (4,))],
        max_batch_size=8,
    )  # fmt: skip
    dm.write_ensemble(
        repo, "guarded",
        [dm.EnsembleStep("first", {"INPUT0": "IN"}, {"OUTPUT0": "middle"}),
         dm.EnsembleStep("refuse_negative", {"INPUT0": "middle"}, {"OUTPUT0": "OUT"})],
        inputs=[tensor("IN", "FP32", (4,))], outputs=[tensor("OUT", "FP32", (4,))],
        max_batch_size=8,
    )  # fmt: skip
    dm.write_ensemble(  # "first" takes [4]: the ensemble's [5] cannot flow into it
        repo, "misshapen",
        [dm.EnsembleStep("first", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})],
        inputs=[tensor("IN", "FP32", (5,))], outputs=[tensor("OUT", "FP32", (4,))],
        max_batch_size=8,
    )  # fmt: skip
    with serving(repo, exit_on_error=False) as process:
        yield process


def _set_instances(model_dir: Path, count: int) -> None:
    path = model_dir / "config.pbtxt"
    cfg = text_format.Parse(path.read_text(), mc.ModelConfig())
    cfg.instance_group[0].count = count
    path.write_text(str(text_format.MessageToString(cfg)))


@pytest.fixture
def http(server: ServingProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.ports.http}", concurrency=8)
    yield client
    client.close()


@pytest.fixture
def grpc(server: ServingProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.ports.grpc}")
    yield client
    client.close()


def http_input(value: float, name: str = "INPUT0") -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, dtype=np.float32), binary_data=True)
    return tensor


def grpc_input(value: float, name: str = "INPUT0") -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, dtype=np.float32))
    return tensor


def metrics(server: ServingProcess) -> str:
    url = f"http://127.0.0.1:{server.ports.metrics}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        match = re.match(rf"^{name}\{{([^}}]*)\}} (\S+)$", line)
        if match and set(labels.items()) <= set(re.findall(r'(\w+)="([^"]*)"', match[1])):
            return float(match[2])
    raise AssertionError(f"{name} {labels} not exposed")


def test_http_requests_are_batched_to_the_preferred_size(
    server: ServingProcess, http: httpclient.InferenceServerClient
) -> None:
    before = http.get_inference_statistics("batcher")["model_stats"][0]
    handles = [http.async_infer("batcher", [http_input(i)]) for i in range(4)]
    results = [handle.get_result() for handle in handles]
    assert [int(r.as_numpy("BATCH_SIZE")[0, 0]) for r in results] == [4, 4, 4, 4]
    assert [float(r.as_numpy("OUTPUT0")[0, 0]) for r in results] == [0.0, 1.0, 2.0, 3.0]
    began = time.monotonic()
    pair = [http.async_infer("batcher", [http_input(9)]) for _ in range(2)]
    sizes = [int(handle.get_result().as_numpy("BATCH_SIZE")[0, 0]) for handle in pair]
    assert sizes == [2, 2] and time.monotonic() - began >= 0.9  # released by the queue delay
    after = http.get_inference_statistics("batcher")["model_stats"][0]
    assert after["execution_count"] - before["execution_count"] == 2
    assert after["inference_count"] - before["inference_count"] == 6
    sizes_seen = {entry["batch_size"] for entry in after["batch_stats"]}
    assert {2, 4} <= sizes_seen
    text = metrics(server)
    labels = {"model": "batcher", "version": "1"}
    assert metric(text, "portico_batch_releases_total", **labels, reason="preferred_size") >= 1
    assert metric(text, "portico_batch_releases_total", **labels, reason="queue_delay") >= 1
    assert metric(text, "nv_inference_exec_count", **labels) == after["execution_count"]
    assert (
        metric(text, "nv_inference_request_success", **labels)
        == (after["inference_stats"]["success"]["count"])
    )


def test_grpc_full_queue_is_refused_with_unavailable(
    server: ServingProcess, grpc: grpcclient.InferenceServerClient
) -> None:
    outcomes: list[Any] = []

    def done(result: Any, error: InferenceServerException | None) -> None:
        outcomes.append(error if error is not None else result)

    for value in range(2):  # one executing, one queued: the queue is full
        grpc.async_infer("bounded", [grpc_input(value)], done)
        settled(server, "bounded", in_flight=value + 1, queued=value)
    grpc.async_infer("bounded", [grpc_input(2)], done)
    deadline = time.monotonic() + 10
    while len(outcomes) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    errors = [o for o in outcomes if isinstance(o, InferenceServerException)]
    assert len(errors) == 1
    assert errors[0].status() == "StatusCode.UNAVAILABLE"
    assert "Exceeds maximum queue size" in errors[0].message()
    text = metrics(server)
    assert metric(text, "nv_inference_request_failure", model="bounded", reason="REJECTED") >= 1


def test_http_request_timeout_shortens_the_queue_policy_and_expires(
    server: ServingProcess, http: httpclient.InferenceServerClient
) -> None:
    busy = http.async_infer("bounded", [http_input(1)])
    # NOTE: gevent's sleep: the client sends ``busy`` from a greenlet, which runs only while this
    # thread waits in gevent (time.sleep left the two requests' order to chance).
    settled(server, "bounded", in_flight=1, queued=0, sleep=gevent.sleep)
    with pytest.raises(InferenceServerException) as info:
        http.infer("bounded", [http_input(2)], timeout=50_000)
    assert info.value.status() == "503"
    assert "Request timeout expired" in info.value.message()
    busy.get_result()


def test_higher_priority_requests_overtake_queued_ones(
    server: ServingProcess, grpc: grpcclient.InferenceServerClient
) -> None:
    order = completion_order(grpc, [
        ("busy", "prioritized", 0, 1000, 0.0), ("low", "prioritized", 1, 0, 0.0, 2),
        ("high", "prioritized", 2, 0, 0.0, 1),
    ], server=server)  # fmt: skip
    assert order == ["busy", "high", "low"]


def sequence_input(value: int, client: Any) -> Any:
    tensor = client.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return tensor


def test_interleaved_sequences_over_grpc_keep_their_own_state_and_controls(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    sums: dict[int, list[tuple[int, int, int]]] = {1001: [], 1002: []}
    for step, (a, b) in enumerate([(1, 10), (2, 20), (3, 30)]):
        for corrid, value in ((1001, a), (1002, b)):
            result = grpc.infer(
                "accumulate", [sequence_input(value, grpcclient)], sequence_id=corrid,
                sequence_start=step == 0, sequence_end=step == 2,
            )  # fmt: skip
            sums[corrid].append((
                int(result.as_numpy("OUTPUT")[0, 0]), int(result.as_numpy("CORR")[0, 0]),
                int(result.as_numpy("FIRST")[0, 0]),
            ))  # fmt: skip
            assert result.as_numpy("STATE_OUT") is None  # implicit state stays in the server
    assert sums[1001] == [(1, 1001, 1), (3, 1001, 0), (6, 1001, 0)]
    assert sums[1002] == [(10, 1002, 1), (30, 1002, 0), (60, 1002, 0)]
    with pytest.raises(InferenceServerException) as info:
        grpc.infer("accumulate", [sequence_input(1, grpcclient)], sequence_id=1001)
    assert "must specify the START flag on the first request of the sequence" in (
        info.value.message()
    )


def test_sequence_request_without_correlation_id_is_refused_over_http(
    http: httpclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as info:
        http.infer("accumulate", [sequence_input(1, httpclient)])
    assert info.value.status() == "400"
    assert "must specify a non-zero or non-empty correlation ID" in info.value.message()


def test_ensemble_over_http_and_grpc_runs_each_step_through_its_model(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    before = http.get_inference_statistics("first")["model_stats"][0]["inference_count"]
    result = http.infer("chain", [http_input(5, "IN")])
    assert np.array_equal(result.as_numpy("OUT"), np.full((1, 4), 5.0, dtype=np.float32))
    result = grpc.infer("chain", [grpc_input(6, "IN")])
    assert np.array_equal(result.as_numpy("OUT"), np.full((1, 4), 6.0, dtype=np.float32))
    stats = http.get_inference_statistics("first")["model_stats"][0]
    assert stats["inference_count"] - before == 2
    chain = grpc.get_inference_statistics("chain", as_json=True)["model_stats"][0]
    assert int(chain["inference_stats"]["success"]["count"]) >= 2


def test_concurrent_http_calls_share_instances_without_errors(
    http: httpclient.InferenceServerClient,
) -> None:
    handles = [http.async_infer("chain", [http_input(v, "IN")]) for v in range(8)]
    results = [handle.get_result() for handle in handles]
    assert [float(r.as_numpy("OUT")[0, 0]) for r in results] == [float(v) for v in range(8)]


def test_grpc_cancelled_queued_request_never_runs_and_counts_as_canceled(
    server: ServingProcess, grpc: grpcclient.InferenceServerClient
) -> None:
    labels = {"model": "prioritized", "version": "1"}
    before = grpc.get_inference_statistics("prioritized", as_json=True)["model_stats"][0]
    canceled_before = metric(metrics(server), "nv_inference_request_failure", **labels,
                             reason="CANCELED")  # fmt: skip
    finished: list[Any] = []
    slow = {"execute_delay_ms": 1500}  # PYTHON_SLEEP's per-request delay: time to cancel
    grpc.async_infer("prioritized", [grpc_input(0)], lambda result, error: finished.append(error),
                     parameters=slow)  # fmt: skip
    settled(server, "prioritized", in_flight=1, queued=0)
    victim = grpc.async_infer("prioritized", [grpc_input(1)], lambda result, error: None)
    settled(server, "prioritized", in_flight=2, queued=1)
    victim.cancel()
    deadline = time.monotonic() + 10
    while not finished and time.monotonic() < deadline:
        time.sleep(0.02)
    assert finished == [None]
    time.sleep(0.5)  # past the time the victim would have executed
    after = grpc.get_inference_statistics("prioritized", as_json=True)["model_stats"][0]
    assert int(after["execution_count"]) - int(before.get("execution_count", 0)) == 1
    canceled = metric(metrics(server), "nv_inference_request_failure", **labels, reason="CANCELED")
    assert canceled == canceled_before + 1


def test_statistics_extension_carries_every_field_over_http_and_grpc(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    handles = [http.async_infer("batcher", [http_input(i)]) for i in range(4)]
    for handle in handles:
        handle.get_result()
    over_http = http.get_inference_statistics("batcher", "1")["model_stats"][0]
    assert set(over_http) >= {
        "name", "version", "last_inference", "inference_count", "execution_count",
        "inference_stats", "batch_stats",
    }  # fmt: skip
    assert set(over_http["inference_stats"]) == {
        "success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
        "cache_hit", "cache_miss",
    }  # fmt: skip
    over_grpc = grpc.get_inference_statistics("batcher", "1", as_json=True)["model_stats"][0]
    sizes_http = {b["batch_size"] for b in over_http["batch_stats"]}
    sizes_grpc = {int(b["batch_size"]) for b in over_grpc["batch_stats"]}
    assert 4 in sizes_http and sizes_http == sizes_grpc
    four = next(b for b in over_grpc["batch_stats"] if int(b["batch_size"]) == 4)
    assert int(four["compute_infer"]["count"]) >= 1 and int(four["compute_infer"]["ns"]) > 0


def settled(
    server: ServingProcess, model: str, *, in_flight: int, queued: int, sleep: Any = time.sleep
) -> None:
    """Wait until ``model``'s scheduler holds ``in_flight`` requests, ``queued`` of them waiting:
    the requests sent so far have arrived (and the rest are executing), whatever each took."""
    scheduler = server.server.resolve(model, None).scheduler
    assert scheduler is not None
    deadline = time.monotonic() + 10
    while (scheduler.in_flight, scheduler.queue_depth) != (in_flight, queued):
        assert time.monotonic() < deadline, f"{model}: not {in_flight} in flight, {queued} queued"
        sleep(0.01)


def completion_order(
    client: grpcclient.InferenceServerClient,
    calls: list[tuple],  # type: ignore[type-arg]
    server: ServingProcess | None = None,
) -> list[str]:
    """Send ``(tag, model, value, delay_ms, pause_s[, priority])`` calls; tags as they complete.
    With ``server``, each call is first seen arrived (the first executing, the rest queued)."""
    finished: list[str] = []
    for sent, (tag, model, value, delay_ms, pause_s, *priority) in enumerate(calls, 1):

        def record(result: Any, error: Any, tag: str = tag) -> None:
            finished.append(tag if error is None else f"{tag}: {error}")

        parameters = {"execute_delay_ms": delay_ms} if delay_ms else None
        client.async_infer(model, [grpc_input(value)], record, parameters=parameters,
                           priority=priority[0] if priority else 0)  # fmt: skip
        if server is not None:
            settled(server, model, in_flight=sent, queued=sent - 1)
        time.sleep(pause_s)
    deadline = time.monotonic() + 10
    while len(finished) < len(calls) and time.monotonic() < deadline:
        time.sleep(0.02)
    return finished


def test_delay_policy_moves_a_timed_out_request_behind_newer_ones(
    server: ServingProcess, grpc: grpcclient.InferenceServerClient
) -> None:
    # busy runs 3.6 s; "old", queued behind it, times out (2 s) and is delayed; "new" is sent
    # 2.7 s after old was seen queued: past old's timeout, and busy ends about 0.85 s later,
    # well within new's own (at least 0.7 s of room each way).
    order = completion_order(grpc, [
        ("busy", "delayed", 0, 3600, 0.0), ("old", "delayed", 1, 0, 2.7),
        ("new", "delayed", 2, 0, 0.0),
    ], server=server)  # fmt: skip
    assert order == ["busy", "new", "old"]


def test_preserve_ordering_holds_a_fast_response_behind_a_slow_one(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    order = completion_order(
        grpc, [("slow", "ordered", 0, 500, 0.05), ("fast", "ordered", 1, 0, 0.0)]
    )
    assert order == ["slow", "fast"]  # "fast" ran on the second instance but waited its turn


def test_backlogged_sequence_gets_the_slot_of_an_idle_one_over_grpc(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    began = time.monotonic()  # before 501's START: its idle timeout (0.3 s) starts after it
    grpc.infer("accumulate_one", [sequence_input(1, grpcclient)], sequence_id=501,
               sequence_start=True)  # fmt: skip
    result = grpc.infer("accumulate_one", [sequence_input(7, grpcclient)], sequence_id=502,
                        sequence_start=True, sequence_end=True)  # fmt: skip
    assert time.monotonic() - began >= 0.3  # waited in the backlog for 501's idle timeout
    assert int(result.as_numpy("OUTPUT")[0, 0]) == 7 and int(result.as_numpy("CORR")[0, 0]) == 502
    with pytest.raises(InferenceServerException) as info:
        grpc.infer("accumulate_one", [sequence_input(1, grpcclient)], sequence_id=501)
    assert "must specify the START flag" in info.value.message()


def test_ensemble_step_error_names_the_step_over_http(
    http: httpclient.InferenceServerClient,
) -> None:
    assert float(http.infer("guarded", [http_input(2, "IN")]).as_numpy("OUT")[0, 0]) == 2.0
    with pytest.raises(InferenceServerException) as info:
        http.infer("guarded", [http_input(-1, "IN")])
    assert info.value.message().startswith(
        "in ensemble 'guarded', step 1 (model 'refuse_negative'): "
    )
    assert "negative input refused" in info.value.message()


def test_ensemble_load_time_validation_error_is_the_models_reason(
    http: httpclient.InferenceServerClient,
) -> None:
    index = {row["name"]: row for row in http.get_model_repository_index()}
    assert index["misshapen"]["state"] == "UNAVAILABLE"
    reason = index["misshapen"]["reason"]
    assert "tensor 'IN' has shape [-1, 4] in model 'first' but [-1, 5] in the ensemble" in reason
    assert not http.is_model_ready("misshapen")
