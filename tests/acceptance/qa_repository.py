"""Models of Triton's server QA suites (``qa/common`` generators, ONNX and Python variants only).

Names follow ``qa/``: ``onnx_zero_1_float32`` (identity, dims [-1], max_batch_size 8),
``onnx_nobatch_zero_1_float32``, ``onnx_zero_1_object`` (BYTES), ``onnx_zero_1_object_1_element``
(BYTES dims [1]), ``onnx_zero_1_float16``/``onnx_zero_3_float32`` (raw-binary refusals),
``simple_identity``/``simple_identity_int64`` (JSON depth), ``optional_identity`` (optional input),
``parameter`` (echoes custom request parameters), ``onnx_int32_int32_int32`` (versions 1-3 on disk,
policy ``specific [1, 3]``),
``batcher_preferred`` (dynamic batcher, preferred size 4 + delay), ``queue_max_1`` and
``queue_timeout`` (queue policies), ``slow`` (delay per request parameter); the Python sleep
model replaces QA's custom delay backend.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from repository import demo_models as dm

BATCHER_DELAY_US = 2_000_000
QUEUE_TIMEOUT_US = 1_000_000

OPTIONAL_IDENTITY = textwrap.dedent('''\
    """OUTPUT0 = INPUT0 (+ INPUT1 when the optional INPUT1 was sent)."""
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                extra = pb_utils.get_input_tensor_by_name(request, "INPUT1")
                if extra is not None:
                    value = value + extra.as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", value)]))
            return responses
''')


PARAMETER_ECHO = textwrap.dedent('''\
    """OUTPUT0 = the request's custom parameters as one JSON string (L0_parameters' model)."""
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                text = request.parameters() or "{}"
                out = np.array([text.encode()], dtype=np.object_)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
            return responses
''')


def _rewrite_config(model_dir: Path, extra_text: str) -> None:
    path = model_dir / "config.pbtxt"
    cfg = text_format.Parse(path.read_text(), mc.ModelConfig())
    text_format.Merge(extra_text, cfg)
    path.write_text(text_format.MessageToString(cfg))


def _write_multi_identity(repo: Path, name: str, count: int) -> Path:
    """``onnx_zero_<count>_float32``: INPUTi -> OUTPUTi identities, dims [-1], max_batch_size 8."""
    import onnx

    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    fp32 = onnx.TensorProto.FLOAT
    nodes = [onnx.helper.make_node("Identity", [f"INPUT{i}"], [f"OUTPUT{i}"]) for i in range(count)]
    inputs = [
        onnx.helper.make_tensor_value_info(f"INPUT{i}", fp32, ["b", "d"]) for i in range(count)
    ]
    outputs = [
        onnx.helper.make_tensor_value_info(f"OUTPUT{i}", fp32, ["b", "d"]) for i in range(count)
    ]
    graph = onnx.helper.make_graph(nodes, name, inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(model_dir / "1" / "model.onnx"))
    text = dm.build_config(
        name,
        platform="onnxruntime_onnx",
        max_batch_size=8,
        inputs=[dm.TensorDecl(f"INPUT{i}", "FP32", (-1,)) for i in range(count)],
        outputs=[dm.TensorDecl(f"OUTPUT{i}", "FP32", (-1,)) for i in range(count)],
    )
    (model_dir / "config.pbtxt").write_text(text)
    return model_dir


def write_qa_repository(repo: Path) -> None:
    """Every model the QA checks in ``test_server_qa.py`` use."""
    dm.write_onnx_add_sub(repo, "simple", dims=(16,), max_batch_size=8)
    dm.write_onnx_identity(repo, "onnx_zero_1_float32", dtype="FP32", dims=(-1,))
    dm.write_onnx_identity(
        repo, "onnx_nobatch_zero_1_float32", dtype="FP32", dims=(-1,), max_batch_size=0
    )
    dm.write_onnx_identity(repo, "onnx_zero_1_object", dtype="BYTES", dims=(-1,))
    dm.write_onnx_identity(repo, "onnx_zero_1_object_1_element", dtype="BYTES", dims=(1,))
    dm.write_onnx_identity(repo, "onnx_zero_1_float16", dtype="FP16", dims=(-1, -1))
    _write_multi_identity(repo, "onnx_zero_3_float32", 3)
    dm.write_python_identity(repo, "simple_identity")
    dm.write_onnx_identity(repo, "simple_identity_int64", dtype="INT64", dims=(-1,))

    optional_config = dm.build_config(
        "optional_identity",
        backend="python",
        max_batch_size=8,
        inputs=[dm.TensorDecl("INPUT0", "FP32", (-1,)), dm.TensorDecl("INPUT1", "FP32", (-1,))],
        outputs=[dm.TensorDecl("OUTPUT0", "FP32", (-1,))],
    )
    model_dir = dm.write_python_model(repo, "optional_identity", OPTIONAL_IDENTITY, optional_config)
    _write_config_optional_input(model_dir, "INPUT1")

    parameter_config = dm.build_config(
        "parameter",
        backend="python",
        inputs=[dm.TensorDecl("INPUT0", "FP32", (1,))],
        outputs=[dm.TensorDecl("OUTPUT0", "BYTES", (1,))],
    )
    dm.write_python_model(repo, "parameter", PARAMETER_ECHO, parameter_config)

    for version in (1, 2, 3):
        versioned = dm.write_onnx_add_sub(repo, "onnx_int32_int32_int32", version=version)
    _rewrite_config(versioned, "version_policy { specific { versions: [ 1, 3 ] } }")

    batcher = dm.write_python_sleep(repo, "batcher_preferred", max_batch_size=8, dims=(-1,))
    _rewrite_config(
        batcher,
        "dynamic_batching { preferred_batch_size: [ 4 ] "
        f"max_queue_delay_microseconds: {BATCHER_DELAY_US} }}",
    )
    dm.write_python_sleep(repo, "slow", max_batch_size=0, dims=(-1,), dynamic_batching=False)
    queue = dm.write_python_sleep(repo, "queue_max_1", max_batch_size=1)
    _rewrite_config(queue, "dynamic_batching { default_queue_policy { max_queue_size: 1 } }")
    timeout = dm.write_python_sleep(repo, "queue_timeout", max_batch_size=1)
    _rewrite_config(
        timeout,
        "dynamic_batching { default_queue_policy { timeout_action: REJECT "
        f"default_timeout_microseconds: {QUEUE_TIMEOUT_US} }} }}",
    )


def _write_config_optional_input(model_dir: Path, name: str) -> None:
    path = model_dir / "config.pbtxt"
    cfg = text_format.Parse(path.read_text(), mc.ModelConfig())
    for tensor in cfg.input:
        if tensor.name == name:
            tensor.optional = True
    path.write_text(text_format.MessageToString(cfg))
