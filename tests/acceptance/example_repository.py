"""Triton's example model repository (``server/docs/examples/model_repository``), regenerated.

The models behave like the upstream ones the client examples were written against: ``simple``
(INT32 add/sub), ``simple_string`` (decimal strings added/subtracted), ``simple_identity`` (Python
BYTES identity), ``simple_sequence`` (OUTPUT = READY * (INPUT + START)), ``simple_dyna_sequence``
(OUTPUT = READY * (INPUT + START + END * CORRID), oldest strategy), plus the python_backend
``add_sub`` example and an ensemble over ``simple``. Generic models come from
``repository.demo_models``; the ones it has no generator for are written here.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import onnx
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from repository import demo_models as dm

ONNX_OPSET = 17
ONNX_IR_VERSION = 8
SHORT_IDLE_US = 1_000_000


def _save_onnx(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    path: Path,
) -> None:
    graph = onnx.helper.make_graph(nodes, "acceptance", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", ONNX_OPSET)])
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def _tensor(name: str, elem_type: int, shape: list[int | str]) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(name, elem_type, shape)


def _write_config(model_dir: Path, cfg: mc.ModelConfig) -> None:
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(cfg))


# --------------------------------------------------------------------------------- simple_string


def write_simple_string(repo: Path, name: str = "simple_string") -> Path:
    """INPUT0/INPUT1 STRING [16] holding decimal ints -> OUTPUT0/1 = sum/difference as strings."""
    model_dir = repo / name
    string, int32 = onnx.TensorProto.STRING, onnx.TensorProto.INT32
    shape: list[int | str] = ["batch", 16]
    _save_onnx(
        [
            onnx.helper.make_node("Cast", ["INPUT0"], ["a"], to=int32),
            onnx.helper.make_node("Cast", ["INPUT1"], ["b"], to=int32),
            onnx.helper.make_node("Add", ["a", "b"], ["sum"]),
            onnx.helper.make_node("Sub", ["a", "b"], ["diff"]),
            onnx.helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=string),
            onnx.helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=string),
        ],
        [_tensor(n, string, shape) for n in ("INPUT0", "INPUT1")],
        [_tensor(n, string, shape) for n in ("OUTPUT0", "OUTPUT1")],
        model_dir / "1" / "model.onnx",
    )
    text = dm.build_config(
        name,
        platform="onnxruntime_onnx",
        max_batch_size=8,
        inputs=[dm.TensorDecl(n, "BYTES", (16,)) for n in ("INPUT0", "INPUT1")],
        outputs=[dm.TensorDecl(n, "BYTES", (16,)) for n in ("OUTPUT0", "OUTPUT1")],
    )
    (model_dir / "config.pbtxt").write_text(text)
    return model_dir


# ------------------------------------------------------------------------------- simple_sequence

SEQUENCE_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {{
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }}
  ]
}}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def write_simple_sequence(
    repo: Path, name: str = "simple_sequence", *, idle_us: int | None = None
) -> Path:
    """Direct sequence batching; the stateless graph OUTPUT = READY * (INPUT + START)."""
    model_dir = repo / name
    int32 = onnx.TensorProto.INT32
    shape: list[int | str] = ["batch", 1]
    _save_onnx(
        [
            onnx.helper.make_node("Add", ["INPUT", "START"], ["sum"]),
            onnx.helper.make_node("Mul", ["READY", "sum"], ["OUTPUT"]),
        ],
        [_tensor(n, int32, shape) for n in ("INPUT", "START", "READY")],
        [_tensor("OUTPUT", int32, shape)],
        model_dir / "1" / "model.onnx",
    )
    cfg = text_format.Parse(SEQUENCE_CONFIG.format(name=name), mc.ModelConfig())
    if idle_us is not None:
        cfg.sequence_batching.max_sequence_idle_microseconds = idle_us
    _write_config(model_dir, cfg)
    return model_dir


# -------------------------------------------------------------------------- simple_dyna_sequence

DYNA_SEQUENCE_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
sequence_batching {{
  max_sequence_idle_microseconds: 10000000
  oldest {{ max_candidate_sequences: 1024 max_queue_delay_microseconds: 10000 }}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }} ] }}
  ]
}}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "execute_delay_ms" value: {{ string_value: "3" }} }}
"""

DYNA_SEQUENCE_MODEL = textwrap.dedent('''\
    """OUTPUT = READY * (INPUT + START + END * CORRID), per batch row (Triton's dyna example)."""
    import json
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            config = json.loads(args["model_config"])
            delay = config.get("parameters", {}).get("execute_delay_ms", {})
            self.delay_s = float(delay.get("string_value", "0") or 0) / 1000.0

        def execute(self, requests):
            time.sleep(self.delay_s)
            responses = []
            for request in requests:
                def get(name):
                    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                value = get("INPUT").astype(np.int64)
                start, end, ready = get("START"), get("END"), get("READY")
                corrid = get("CORRID").astype(np.int64)
                out = ready * (value + start + end * corrid)
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT", out.astype(np.int32))]))
            return responses
''')


def write_simple_dyna_sequence(repo: Path, name: str = "simple_dyna_sequence") -> Path:
    """Oldest-strategy sequence batching with START/END/READY/CORRID controls (Python model)."""
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.py").write_text(DYNA_SEQUENCE_MODEL)
    _write_config(
        model_dir, text_format.Parse(DYNA_SEQUENCE_CONFIG.format(name=name), mc.ModelConfig())
    )
    return model_dir


# --------------------------------------------------------------------------------------- ensemble


def write_simple_ensemble(repo: Path, name: str = "ensemble_add_sub_int32_int32_int32") -> Path:
    """Triton's L0_simple_ensemble model: ``simple`` behind an ensemble with renamed tensors."""
    return dm.write_ensemble(
        repo,
        name,
        [
            dm.EnsembleStep(
                "simple",
                {"INPUT0": "INPUT0", "INPUT1": "INPUT1"},
                {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"},
            )
        ],
        inputs=[dm.TensorDecl(n, "INT32", (16,)) for n in ("INPUT0", "INPUT1")],
        outputs=[dm.TensorDecl(n, "INT32", (16,)) for n in ("OUTPUT0", "OUTPUT1")],
        max_batch_size=8,
    )


# ------------------------------------------------------------------------------ the example repo


def write_client_examples_repository(repo: Path) -> None:
    """The non-sequence examples' models: simple, simple_string, simple_identity, add_sub."""
    dm.write_onnx_add_sub(repo, "simple", dims=(16,), max_batch_size=8)
    write_simple_string(repo)
    dm.write_python_identity(repo, "simple_identity")
    dm.write_python_add_sub(repo, "add_sub")


def write_sequence_repository(repo: Path) -> None:
    """The sequence examples' models, and a simple_sequence copy with a 1 s idle time."""
    write_simple_sequence(repo)
    write_simple_dyna_sequence(repo)
    write_simple_sequence(repo, "simple_sequence_idle", idle_us=SHORT_IDLE_US)
