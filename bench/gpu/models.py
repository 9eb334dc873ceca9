"""The benchmark's models, generated (never downloaded): the MLP and a ResNet-50-sized CNN.

The CNN has ResNet-50's layout (a 7x7 stem, bottleneck stages of 3, 4, 6 and 3 blocks at widths
256/512/1024/2048, global pooling, a 1000-way classifier): about 25.5 million parameters and
4 GFLOPs per image at 224x224, with random weights. Batch-normalisation is folded into the
convolutions, as an exported inference graph has it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

RESNET50_STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))  # (blocks, bottleneck width)
IMAGE = (3, 224, 224)
CLASSES = 1000


class _Graph:
    def __init__(self, seed: int) -> None:
        self.nodes: list[object] = []
        self.weights: list[object] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def conv(
        self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, relu: bool = True
    ) -> str:
        from onnx import helper, numpy_helper

        self.count += 1
        name = f"conv{self.count}"
        scale = np.sqrt(2.0 / (c_in * k * k))
        weight = (self.rng.standard_normal((c_out, c_in, k, k)) * scale).astype(np.float32)
        self.weights += [
            numpy_helper.from_array(weight, f"{name}_w"),
            numpy_helper.from_array(np.zeros(c_out, np.float32), f"{name}_b"),
        ]
        pad = k // 2
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}_w", f"{name}_b"],
                [name],
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[pad, pad, pad, pad],
            )
        )
        return self.relu(name) if relu else name

    def relu(self, x: str) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node("Relu", [x], [f"{x}_relu"]))
        return f"{x}_relu"

    def add(self, a: str, b: str) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node("Add", [a, b], [f"{a}_plus"]))
        return self.relu(f"{a}_plus")


def resnet50_graph(seed: int = 0) -> object:
    """The ONNX model (opset 17, dynamic batch) ``INPUT0 [N,3,224,224] -> OUTPUT0 [N,1000]``."""
    from onnx import TensorProto, helper, numpy_helper

    g = _Graph(seed)
    x = g.conv("INPUT0", 3, 64, 7, stride=2)
    g.nodes.append(
        helper.make_node(
            "MaxPool", [x], ["pool0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        )
    )
    x, channels = "pool0", 64
    for stage, (blocks, width) in enumerate(RESNET50_STAGES):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 0 else 1
            y = g.conv(x, channels, width, 1)
            y = g.conv(y, width, width, 3, stride=stride)
            y = g.conv(y, width, width * 4, 1, relu=False)
            shortcut = x if block else g.conv(x, channels, width * 4, 1, stride=stride, relu=False)
            x, channels = g.add(y, shortcut), width * 4
    g.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    g.nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], axis=1))
    fc = (g.rng.standard_normal((channels, CLASSES)) * 0.01).astype(np.float32)
    g.weights += [
        numpy_helper.from_array(fc, "fc_w"),
        numpy_helper.from_array(np.zeros(CLASSES, np.float32), "fc_b"),
    ]
    g.nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["OUTPUT0"]))
    graph = helper.make_graph(
        g.nodes,
        "resnet50_sized",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["N", *IMAGE])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["N", CLASSES])],
        g.weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def parameter_count(model: object) -> int:
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer)  # type: ignore[attr-defined]


def write_folder(repo: Path, *, max_batch_size: int = 64, delay_us: int = 500) -> dict[str, Path]:
    """A Triton folder with ``mlp`` and ``resnet50`` on KIND_GPU with dynamic batching."""
    import onnx

    from repository import demo_models

    demo_models.write_onnx_mlp(repo, "mlp", 1, max_batch_size=max_batch_size)
    resnet = repo / "resnet50" / "1"
    resnet.mkdir(parents=True, exist_ok=True)
    onnx.save(resnet50_graph(), str(resnet / "model.onnx"))
    io = {"mlp": ("256", "16"), "resnet50": ("3, 224, 224", "1000")}
    for name, (dims_in, dims_out) in io.items():
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}" platform: "onnxruntime_onnx" max_batch_size: {max_batch_size}\n'
            f'input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [{dims_in}] }}]\n'
            f'output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [{dims_out}] }}]\n'
            "instance_group [{ kind: KIND_GPU count: 2 gpus: [0] }]\n"
            f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n"
        )
    return {name: repo / name / "1" / "model.onnx" for name in io}
