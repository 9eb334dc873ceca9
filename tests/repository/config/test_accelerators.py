"""Execution accelerators: Triton's ONNX Runtime keys checked, then turned into provider options."""

from __future__ import annotations

from pathlib import Path

import pytest

from repository.config import config_problems, parse_config_text
from repository.config.accelerators import provider_options

pytestmark = pytest.mark.embedded

ONNX = """
name: "m" platform: "onnxruntime_onnx" max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _accelerators(*entries: str) -> str:
    body = " ".join(f"gpu_execution_accelerator {{ {e} }}" for e in entries)
    return ONNX + f"optimization {{ execution_accelerators {{ {body} }} }}"


def _param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: "{value}" }}'


def test_tensorrt_fp16_becomes_trt_options_with_the_cache_in_the_replica_folder() -> None:
    text = _accelerators(
        'name: "tensorrt" '
        + _param("precision_mode", "FP16")
        + _param("max_workspace_size_bytes", "4294967296")
        + _param("trt_builder_optimization_level", "3")
    )
    config = parse_config_text(text)
    assert config_problems(config) == []
    providers = provider_options(config, device_id=1, cache_dir=Path("/cache/trt"))
    assert [name for name, _ in providers] == [
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
    ]
    trt = providers[0][1]
    assert trt["device_id"] == "1"
    assert trt["trt_fp16_enable"] == "True"
    assert trt["trt_int8_enable"] == "False"
    assert trt["trt_max_workspace_size"] == "4294967296"
    assert trt["trt_builder_optimization_level"] == "3"
    assert trt["trt_engine_cache_enable"] == "True"
    assert trt["trt_engine_cache_path"] == "/cache/trt"
    assert providers[1][1] == {"device_id": "1"}


def test_tensorrt_defaults_to_fp32_and_a_one_gib_workspace() -> None:
    config = parse_config_text(_accelerators('name: "tensorrt"'))
    trt = provider_options(config, device_id=0, cache_dir=Path("/c"))[0][1]
    assert trt["trt_fp16_enable"] == "False"
    assert trt["trt_max_workspace_size"] == str(1 << 30)


def test_cuda_accelerator_options_reach_the_cuda_provider() -> None:
    text = _accelerators(
        'name: "cuda" ' + _param("cudnn_conv_algo_search", "1") + _param("use_tf32", "0")
    )
    config = parse_config_text(text)
    assert config_problems(config) == []
    assert provider_options(config, device_id=0, cache_dir=Path("/c")) == [
        (
            "CUDAExecutionProvider",
            {"device_id": "0", "cudnn_conv_algo_search": "1", "use_tf32": "0"},
        )
    ]


def test_cuda_graphs_are_refused_rather_than_replayed_on_stale_buffers() -> None:
    text = _accelerators(
        'name: "cuda" ' + _param("enable_cuda_graph", "1"),
        'name: "tensorrt" ' + _param("trt_cuda_graph_enable", "1"),
    )
    found = config_problems(parse_config_text(text))
    where = "optimization.execution_accelerators.gpu_execution_accelerator"
    assert [p.split(":")[0] for p in found if "CUDA graphs" in p] == [
        f"{where}[0].parameters['enable_cuda_graph']",
        f"{where}[1].parameters['trt_cuda_graph_enable']",
    ]
    assert len(found) == 2


def test_without_accelerators_a_gpu_instance_runs_on_the_cuda_provider() -> None:
    config = parse_config_text(ONNX)
    assert provider_options(config, device_id=2, cache_dir=Path("/c")) == [
        ("CUDAExecutionProvider", {"device_id": "2"})
    ]


def test_keys_naming_files_on_the_replica_are_refused() -> None:
    text = _accelerators(
        'name: "tensorrt" '
        + _param("trt_engine_cache_path", "/etc")
        + _param("trt_extra_plugin_lib_paths", "/tmp/evil.so")
    )
    found = config_problems(parse_config_text(text))
    where = "optimization.execution_accelerators.gpu_execution_accelerator[0].parameters"
    assert (
        f"{where}['trt_engine_cache_path']: names a file on the replica; Portico keeps "
        "TensorRT's caches in the replica's cache folder" in found
    )
    assert any(p.startswith(f"{where}['trt_extra_plugin_lib_paths']") for p in found)


def test_every_bad_value_is_reported_at_once() -> None:
    text = _accelerators(
        'name: "tensorrt" '
        + _param("precision_mode", "FP8")
        + _param("max_workspace_size_bytes", "lots")
        + _param("colour", "red"),
        'name: "cuda" ' + _param("warp_speed", "9"),
    )
    found = config_problems(parse_config_text(text))
    where = "optimization.execution_accelerators.gpu_execution_accelerator"
    assert f"{where}[0].parameters['precision_mode']: 'FP8' is not one of FP16, FP32, INT8" in found
    assert (
        f"{where}[0].parameters['max_workspace_size_bytes']: 'lots' is not a positive number "
        "of bytes" in found
    )
    assert f"{where}[0].parameters['colour']: not a TensorRT option" in found
    cuda = f"{where}[1].parameters['warp_speed']: not an option of ONNX Runtime's CUDA provider"
    assert cuda in found


def test_gpu_accelerators_are_only_for_onnx_runtime_models() -> None:
    text = (
        'name: "m" platform: "pytorch_libtorch" max_batch_size: 0 '
        'input [ { name: "X__0" data_type: TYPE_FP32 dims: [ 4 ] } ] '
        'output [ { name: "Y__0" data_type: TYPE_FP32 dims: [ 4 ] } ] '
        'optimization { execution_accelerators { gpu_execution_accelerator { name: "tensorrt" } } }'
    )
    assert (
        "optimization.execution_accelerators.gpu_execution_accelerator: only ONNX Runtime models "
        "take one" in config_problems(parse_config_text(text))
    )
