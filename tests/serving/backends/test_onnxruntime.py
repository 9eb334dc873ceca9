"""The ONNX Runtime backend on generated models: batching, BYTES, requested outputs, errors."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from repository import demo_models
from serving.backends import thread_priority
from serving.backends.base import InstancePlacement
from serving.backends.onnxruntime import DEFAULT_THREAD_POOL_NICE, OnnxRuntimeInstance
from serving.core.types import InferRequest, InferResponse, RequestedOutput
from serving.errors import ErrorCode, ServingError, UnavailableError
from tests.gpu_requirement import ort_provider_missing, require_gpu

from .specs import spec_for

pytestmark = pytest.mark.embedded

CPU = InstancePlacement(name="m_0", kind="KIND_CPU", intra_op_threads=1)


def _loaded(model_dir: Path, **kwargs: object) -> OnnxRuntimeInstance:
    instance = OnnxRuntimeInstance(spec_for(model_dir, **kwargs), CPU)  # type: ignore[arg-type]
    instance.load()
    return instance


def _add_sub_request(batch: int, seed: int, **kwargs: object) -> InferRequest:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, 16)).astype(np.float32)
    b = rng.standard_normal((batch, 16)).astype(np.float32)
    return InferRequest(model_name="simple", inputs={"INPUT0": a, "INPUT1": b}, **kwargs)  # type: ignore[arg-type]


def write_gather(repo: Path) -> Path:
    """OUTPUT0 = DATA[INDEX]; an out-of-range INDEX fails at run time, not at validation."""
    model_dir = repo / "gather"
    (model_dir / "1").mkdir(parents=True)
    data = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "DATA")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Gather", ["DATA", "INDEX"], ["OUTPUT0"])],
        "gather",
        [onnx.helper.make_tensor_value_info("INDEX", onnx.TensorProto.INT64, ["b", 1])],
        [onnx.helper.make_tensor_value_info("OUTPUT0", onnx.TensorProto.FLOAT, ["b", 1])],
        [data],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(model_dir / "1" / "model.onnx"))
    (model_dir / "config.pbtxt").write_text(
        'name: "gather" platform: "onnxruntime_onnx" max_batch_size: 8\n'
        'input { name: "INDEX" data_type: TYPE_INT64 dims: [1] }\n'
        'output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [1] }\n'
    )
    return model_dir


def test_batch_is_concatenated_and_split_back_per_request(tmp_path: Path) -> None:
    instance = _loaded(demo_models.write_onnx_add_sub(tmp_path, dtype="FP32"))
    requests = [_add_sub_request(n, seed=n, id=f"r{n}") for n in (1, 2, 3)]
    results = instance.execute_checked(requests)
    for request, result in zip(requests, results, strict=True):
        assert isinstance(result, InferResponse)
        assert result.id == request.id and result.model_version == 1
        a, b = request.inputs["INPUT0"], request.inputs["INPUT1"]
        np.testing.assert_allclose(result.outputs["OUTPUT0"], a + b, rtol=1e-6)
        np.testing.assert_allclose(result.outputs["OUTPUT1"], a - b, rtol=1e-6)


def test_only_requested_outputs_are_returned(tmp_path: Path) -> None:
    instance = _loaded(demo_models.write_onnx_add_sub(tmp_path, dtype="FP32"))
    request = _add_sub_request(2, seed=0, outputs=[RequestedOutput(name="OUTPUT1")])
    (result,) = instance.execute_checked([request])
    assert isinstance(result, InferResponse)
    assert list(result.outputs) == ["OUTPUT1"]


def test_bad_request_fails_alone_and_neighbours_succeed(tmp_path: Path) -> None:
    instance = _loaded(demo_models.write_onnx_add_sub(tmp_path, dtype="FP32"))
    bad = _add_sub_request(1, seed=1)
    bad.inputs["INPUT1"] = bad.inputs["INPUT1"].astype(np.float64)
    missing = _add_sub_request(1, seed=2)
    del missing.inputs["INPUT1"]
    unknown_output = _add_sub_request(1, seed=3, outputs=[RequestedOutput(name="NOPE")])
    good = [_add_sub_request(1, seed=4), _add_sub_request(2, seed=5)]
    results = instance.execute_checked([good[0], bad, missing, unknown_output, good[1]])
    assert isinstance(results[0], InferResponse) and isinstance(results[4], InferResponse)
    for failed in results[1:4]:
        assert isinstance(failed, ServingError) and failed.code is ErrorCode.INVALID_ARG
    assert "data-type is 'FP64'" in str(results[1])
    assert "missing required input(s) ['INPUT1']" in str(results[2])


def test_runtime_failure_of_one_request_does_not_fail_the_batch(tmp_path: Path) -> None:
    instance = _loaded(write_gather(tmp_path))
    indexes = [[[1]], [[99]], [[3], [0]]]
    requests = [
        InferRequest(model_name="gather", inputs={"INDEX": np.array(i, dtype=np.int64)})
        for i in indexes
    ]
    ok1, failed, ok2 = instance.execute_checked(requests)
    assert isinstance(ok1, InferResponse) and ok1.outputs["OUTPUT0"].tolist() == [[1.0]]
    assert isinstance(ok2, InferResponse) and ok2.outputs["OUTPUT0"].tolist() == [[3.0], [0.0]]
    assert isinstance(failed, ServingError) and failed.code is ErrorCode.INTERNAL


def test_requests_with_different_trailing_shapes_run_in_separate_groups(tmp_path: Path) -> None:
    instance = _loaded(demo_models.write_onnx_identity(tmp_path, dims=(-1,)))
    arrays = [
        np.ones((1, 3), np.float32),
        np.zeros((2, 5), np.float32),
        np.ones((1, 3), np.float32),
    ]
    requests = [InferRequest(model_name="identity", inputs={"INPUT0": a}) for a in arrays]
    results = instance.execute_checked(requests)
    for array, result in zip(arrays, results, strict=True):
        assert isinstance(result, InferResponse)
        np.testing.assert_array_equal(result.outputs["OUTPUT0"], array)


def test_bytes_tensors_round_trip(tmp_path: Path) -> None:
    instance = _loaded(demo_models.write_onnx_identity(tmp_path, dtype="BYTES", dims=(-1,)))
    data = np.array([[b"hello", "wörld".encode()], [b"", b"x"]], dtype=object)
    (result,) = instance.execute_checked(
        [InferRequest(model_name="identity", inputs={"INPUT0": data})]
    )
    assert isinstance(result, InferResponse)
    out = result.outputs["OUTPUT0"]
    assert out.dtype == object and out.tolist() == data.tolist()


def test_non_batching_model_runs_requests_one_by_one(tmp_path: Path) -> None:
    instance = _loaded(demo_models.write_onnx_add_sub(tmp_path, dtype="INT32", max_batch_size=0))
    requests = [
        InferRequest(
            model_name="simple",
            inputs={"INPUT0": np.full(16, i, np.int32), "INPUT1": np.ones(16, np.int32)},
        )
        for i in range(3)
    ]
    results = instance.execute_checked(requests)
    assert [r.outputs["OUTPUT0"][0] for r in results] == [1, 2, 3]  # type: ignore[union-attr]


def test_reshape_is_applied_in_and_out(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_identity(tmp_path, dims=(2, 2), max_batch_size=4)
    edit = (
        'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] reshape { shape: [2, 2] } }] '
        'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] reshape { shape: [2, 2] } }]'
    )
    spec = spec_for(model_dir)
    del spec.config.input[:]
    del spec.config.output[:]
    from google.protobuf import text_format

    text_format.Merge(edit, spec.config)
    instance = OnnxRuntimeInstance(spec, CPU)
    instance.load()
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    (result,) = instance.execute_checked(
        [InferRequest(model_name="identity", inputs={"INPUT0": data})]
    )
    assert isinstance(result, InferResponse)
    np.testing.assert_array_equal(result.outputs["OUTPUT0"], data)


def test_corrupt_model_fails_to_load_as_unavailable(tmp_path: Path) -> None:
    instance = OnnxRuntimeInstance(spec_for(demo_models.write_corrupt_onnx(tmp_path)), CPU)
    with pytest.raises(UnavailableError, match="onnxruntime could not load the model"):
        instance.load()


def test_missing_model_file_names_the_file(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_identity(tmp_path)
    (model_dir / "1" / "model.onnx").unlink()
    with pytest.raises(UnavailableError, match="model file 'model.onnx' not found"):
        OnnxRuntimeInstance(spec_for(model_dir), CPU).load()


def test_artifact_io_reports_the_models_real_tensors(tmp_path: Path) -> None:
    instance = _loaded(demo_models.write_onnx_add_sub(tmp_path, dtype="INT32", dims=(16,)))
    inputs, outputs = instance.artifact_io()  # type: ignore[misc]
    assert [(t.name, t.datatype, t.shape) for t in inputs] == [
        ("INPUT0", "INT32", (-1, 16)),
        ("INPUT1", "INT32", (-1, 16)),
    ]
    assert [t.name for t in outputs] == ["OUTPUT0", "OUTPUT1"]


def test_cpu_session_uses_the_placements_thread_count(tmp_path: Path) -> None:
    instance = _loaded(demo_models.write_onnx_identity(tmp_path))
    assert instance.providers == ["CPUExecutionProvider"]
    assert instance.can_run_inline()  # a CPU session's cheap runs may stay on the loop
    instance.unload()
    with pytest.raises(UnavailableError, match="not loaded"):
        instance.artifact_io()


@pytest.mark.gpu
def test_gpu_placement_uses_the_cuda_provider(tmp_path: Path) -> None:
    require_gpu(ort_provider_missing("CUDAExecutionProvider"))
    gpu = InstancePlacement(name="m_0", kind="KIND_GPU", device_id=0, intra_op_threads=1)
    instance = OnnxRuntimeInstance(spec_for(demo_models.write_onnx_identity(tmp_path)), gpu)
    instance.load()
    assert instance.providers[0] == "CUDAExecutionProvider"
    assert not instance.can_run_inline()  # a device run always leaves the loop
    data = np.ones((2, 3), np.float32)
    (result,) = instance.execute_checked(
        [InferRequest(model_name="identity", inputs={"INPUT0": data})]
    )
    assert isinstance(result, InferResponse)


@pytest.mark.gpu
def test_tensorrt_accelerator_runs_on_the_tensorrt_provider_with_its_engines_in_the_cache(
    tmp_path: Path,
) -> None:
    require_gpu(ort_provider_missing("TensorrtExecutionProvider"))
    model_dir = demo_models.write_onnx_mlp(tmp_path / "repo", "mlp", sizes=(8, 16, 4))
    accelerator = (
        'optimization { execution_accelerators { gpu_execution_accelerator { name: "tensorrt" '
        'parameters { key: "precision_mode" value: "FP16" } '
        'parameters { key: "max_workspace_size_bytes" value: "268435456" } } } }'
    )
    spec = dataclasses.replace(
        spec_for(model_dir, edit=accelerator), cache_dir=tmp_path / "replica-cache"
    )
    gpu = InstancePlacement(name="mlp_0", kind="KIND_GPU", device_id=0, intra_op_threads=1)
    instance = OnnxRuntimeInstance(spec, gpu)
    instance.load()
    assert instance.providers[:2] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    reference = _loaded(model_dir)
    data = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    request = [InferRequest(model_name="mlp", inputs={"INPUT0": data})]
    (on_gpu,) = instance.execute_checked(request)
    (on_cpu,) = reference.execute_checked(request)
    assert isinstance(on_gpu, InferResponse) and isinstance(on_cpu, InferResponse)
    np.testing.assert_allclose(on_gpu.outputs["OUTPUT0"], on_cpu.outputs["OUTPUT0"], atol=5e-2)
    engines = tmp_path / "replica-cache" / "engines" / "mlp" / "1"
    assert any(engines.iterdir()), "the TensorRT engine cache stays in the replica's folder"


def test_gpu_placement_without_cuda_is_unavailable_never_run_on_the_cpu(tmp_path: Path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider; this checks a CPU build")
    gpu = InstancePlacement(name="m_0", kind="KIND_GPU", device_id=1, intra_op_threads=1)
    instance = OnnxRuntimeInstance(spec_for(demo_models.write_onnx_identity(tmp_path)), gpu)
    with pytest.raises(UnavailableError) as info:
        instance.load()
    assert "instance 'm_0' is placed on GPU 1 but onnxruntime" in info.value.message
    assert "has no CUDAExecutionProvider" in info.value.message


def test_sequence_control_tensors_are_not_rejected_as_unknown_inputs() -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from serving.backends.tensors import RequestChecker

    config = text_format.Parse(
        'name: "seq" max_batch_size: 4 input { name: "X" data_type: TYPE_FP32 dims: [1] } '
        'sequence_batching { control_input { name: "START" control { kind: CONTROL_SEQUENCE_START '
        "int32_false_true: [0, 1] } } }",
        model_config_pb2.ModelConfig(),
    )
    inputs = {"X": np.ones((1, 1), np.float32), "START": np.ones((1, 1), np.int32)}
    RequestChecker(config).check(InferRequest(model_name="seq", inputs=inputs))
    with pytest.raises(ServingError, match="unexpected inference input 'OTHER'"):
        RequestChecker(config).check(
            InferRequest(model_name="seq", inputs={**inputs, "OTHER": inputs["X"]})
        )


def _session_options(tmp_path: Path, parameters: str) -> ort.SessionOptions:
    model_dir = demo_models.write_onnx_identity(tmp_path)
    edit = "".join(
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
        for key, value in (item.split("=") for item in parameters.split(",") if item)
    )
    instance = OnnxRuntimeInstance(spec_for(model_dir, edit=edit), CPU)
    instance.load()
    try:
        return instance._require_session().get_session_options()
    finally:
        instance.unload()


@pytest.mark.parametrize(("value", "expected"), [("false", "0"), ("Off", "0"), ("true", "1")])
def test_allow_spinning_reaches_both_of_the_sessions_thread_pools(
    tmp_path: Path, value: str, expected: str
) -> None:
    options = _session_options(tmp_path, f"allow_spinning={value}")
    for pool in ("intra_op", "inter_op"):
        assert options.get_session_config_entry(f"session.{pool}.allow_spinning") == expected


def test_without_allow_spinning_the_session_keeps_ort_s_default(tmp_path: Path) -> None:
    options = _session_options(tmp_path, "")
    with pytest.raises(RuntimeError, match="does not have configuration"):
        options.get_session_config_entry("session.intra_op.allow_spinning")


def test_enable_mem_arena_false_turns_the_arena_off(tmp_path: Path) -> None:
    assert _session_options(tmp_path, "enable_mem_arena=false").enable_cpu_mem_arena is False
    assert _session_options(tmp_path, "enable_mem_arena=1").enable_cpu_mem_arena is True


@pytest.mark.parametrize("key", ["allow_spinning", "enable_mem_arena"])
def test_a_yes_no_parameter_with_another_word_fails_the_load_by_name(
    tmp_path: Path, key: str
) -> None:
    with pytest.raises(
        UnavailableError, match=f"parameter '{key}' must be true or false, got 'sometimes'"
    ):
        _session_options(tmp_path, f"{key}=sometimes")


def _thread_ids() -> set[int]:
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def _nice_values(thread_ids: set[int]) -> set[int]:
    """The nice values of those threads still running (the thread that built the session may
    still be listed for a moment after it ended)."""
    found = set()
    for tid in thread_ids:
        with contextlib.suppress(ProcessLookupError):
            found.add(os.getpriority(os.PRIO_PROCESS, tid))
    return found


@pytest.mark.skipif(not thread_priority.supported(), reason="per-thread nice values are Linux's")
@pytest.mark.parametrize(("value", "nice"), [(None, DEFAULT_THREAD_POOL_NICE), ("0", 0), ("7", 7)])
def test_thread_pool_nice_lowers_the_priority_of_ort_s_pool_threads_alone(
    tmp_path: Path, value: str | None, nice: int
) -> None:
    # Two intra-op threads: ORT starts one pool thread with the session (the caller of ``run``
    # is the other). It runs at the loading thread's nice value plus ``thread_pool_nice``
    # (10 unless the config says otherwise).
    model_dir = demo_models.write_onnx_identity(tmp_path)
    edit = (
        f'parameters {{ key: "thread_pool_nice" value {{ string_value: "{value}" }} }}\n'
        if value is not None
        else ""
    )
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    before = _thread_ids()
    placement = dataclasses.replace(CPU, intra_op_threads=2)
    instance = OnnxRuntimeInstance(spec_for(model_dir, edit=edit), placement)
    instance.load()
    try:
        started = _thread_ids() - before
        assert started, "ORT started no pool thread"
        assert _nice_values(started) == {min(19, own + nice)}
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
        data = np.arange(16, dtype=np.float32).reshape(1, 16)
        [result] = instance.execute([InferRequest(model_name="m", inputs={"INPUT0": data})])
        assert isinstance(result, InferResponse)
        np.testing.assert_array_equal(result.outputs["OUTPUT0"], data)
    finally:
        instance.unload()


@pytest.mark.parametrize("value", ["20", "-1", "low"])
def test_a_thread_pool_nice_outside_0_to_19_fails_the_load_by_name(
    tmp_path: Path, value: str
) -> None:
    with pytest.raises(UnavailableError, match="parameter 'thread_pool_nice' must be"):
        _session_options(tmp_path, f"thread_pool_nice={value}")
