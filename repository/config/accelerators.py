"""``optimization.execution_accelerators`` as Triton's ONNX Runtime backend reads them.

Two GPU accelerators: ``tensorrt`` (ONNX Runtime's TensorRT execution provider, with the CUDA
provider behind it for the nodes TensorRT cannot take) and ``cuda`` (options of the CUDA provider).
Their ``parameters`` become provider options (``provider_options``, pure, so it is tested without a
GPU). Keys that name files on the replica (engine or timing cache paths, plugin libraries,
calibration tables) are refused: a config must not make a replica write or load files outside its
own cache folder, where Portico keeps the TensorRT engine cache.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

TENSORRT, CUDA = "tensorrt", "cuda"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
DEFAULT_TRT_WORKSPACE_BYTES = 1 << 30  # Triton's default: 1 GiB
PRECISION_MODES = frozenset({"FP32", "FP16", "INT8"})

# Triton's keys that are spelt differently from ONNX Runtime's option.
TRT_RENAMED = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "int8_use_native_calibration_table": "trt_int8_use_native_calibration_table",
}
TRT_OPTIONS = frozenset(
    {
        "trt_max_partition_iterations", "trt_min_subgraph_size", "trt_dla_enable", "trt_dla_core",
        "trt_engine_cache_enable", "trt_engine_cache_prefix", "trt_force_sequential_engine_build",
        "trt_context_memory_sharing_enable", "trt_layer_norm_fp32_fallback",
        "trt_timing_cache_enable", "trt_force_timing_cache", "trt_detailed_build_log",
        "trt_build_heuristics_enable", "trt_sparsity_enable", "trt_builder_optimization_level",
        "trt_auxiliary_streams", "trt_tactic_sources", "trt_profile_min_shapes",
        "trt_profile_max_shapes", "trt_profile_opt_shapes",
    }
)  # fmt: skip
TRT_FILE_KEYS = frozenset(
    {
        "trt_engine_cache_path", "trt_timing_cache_path", "trt_extra_plugin_lib_paths",
        "int8_calibration_table_name", "trt_dump_subgraphs", "trt_dump_ep_context_model",
        "trt_ep_context_file_path", "trt_ep_context_embed_mode",
    }
)  # fmt: skip
CUDA_OPTIONS = frozenset(
    {
        "cudnn_conv_algo_search", "gpu_mem_limit", "arena_extend_strategy",
        "do_copy_in_default_stream", "cudnn_conv_use_max_workspace", "cudnn_conv1d_pad_to_nc1d",
        "use_tf32", "prefer_nhwc", "use_ep_level_unified_stream",
        "tunable_op_enable", "tunable_op_tuning_enable", "enable_skip_layer_norm_strict_mode",
    }
)  # fmt: skip

# NOTE: ORT replays a CUDA graph on the device addresses it captured, so it needs inputs and
# outputs bound once (IOBinding) at fixed shapes; Portico feeds each batch from host arrays, which
# would replay stale inputs. Refused until instances bind per shape.
CUDA_GRAPH_KEYS = frozenset({"enable_cuda_graph", "trt_cuda_graph_enable"})

ProviderList = list[tuple[str, dict[str, str]]]


def accelerator_problems(cfg: mc.ModelConfig) -> list[str]:
    """Every problem with the config's execution accelerators (all of them, not the first)."""
    accelerators = cfg.optimization.execution_accelerators
    where = "optimization.execution_accelerators"
    problems = [
        f"{where}.cpu_execution_accelerator[{i}]: '{a.name}' is not supported by Portico"
        for i, a in enumerate(accelerators.cpu_execution_accelerator)
    ]
    gpu = accelerators.gpu_execution_accelerator
    onnx = cfg.backend == "onnxruntime" or cfg.platform == "onnxruntime_onnx"
    if len(gpu) and not onnx:
        problems.append(f"{where}.gpu_execution_accelerator: only ONNX Runtime models take one")
        return problems
    for index, accelerator in enumerate(gpu):
        problems += _gpu_problems(accelerator, f"{where}.gpu_execution_accelerator[{index}]")
    return problems


def provider_options(config: mc.ModelConfig, *, device_id: int, cache_dir: Path) -> ProviderList:
    """ONNX Runtime providers for a GPU instance, best first (the CPU provider is the caller's).

    TensorRT, when asked for, comes first with its engine cache under ``cache_dir``; the CUDA
    provider always follows, carrying the ``cuda`` accelerator's options.
    """
    device = {"device_id": str(device_id)}
    cuda = dict(device)
    providers: ProviderList = []
    for accelerator in config.optimization.execution_accelerators.gpu_execution_accelerator:
        params = dict(accelerator.parameters)
        if accelerator.name == TENSORRT:
            providers.append((TENSORRT_PROVIDER, device | _tensorrt(params, cache_dir)))
        elif accelerator.name == CUDA:
            cuda |= params
    return [*providers, (CUDA_PROVIDER, cuda)]


def wants_gpu_accelerator(config: mc.ModelConfig) -> bool:
    return len(config.optimization.execution_accelerators.gpu_execution_accelerator) > 0


def _tensorrt(params: dict[str, str], cache_dir: Path) -> dict[str, str]:
    precision = params.get("precision_mode", "FP32").upper()
    options = {
        "trt_max_workspace_size": str(DEFAULT_TRT_WORKSPACE_BYTES),
        "trt_fp16_enable": _flag(precision == "FP16"),
        "trt_int8_enable": _flag(precision == "INT8"),
        "trt_engine_cache_enable": "True",
        "trt_timing_cache_enable": "True",
    }
    for key, value in params.items():
        if key in TRT_RENAMED:
            options[TRT_RENAMED[key]] = value
        elif key in TRT_OPTIONS:
            options[key] = value
    # NOTE: both caches live in the replica's own cache folder, never where a config says.
    options["trt_engine_cache_path"] = str(cache_dir)
    options["trt_timing_cache_path"] = str(cache_dir)
    return options


def _gpu_problems(accelerator: mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator,
                  where: str) -> list[str]:  # fmt: skip
    params = dict(accelerator.parameters)
    graphs = [
        f"{where}.parameters['{key}']: CUDA graphs are not supported by Portico yet (ONNX "
        "Runtime replays them on fixed device buffers; Portico feeds each batch from the host)"
        for key in params
        if key in CUDA_GRAPH_KEYS
    ]
    if accelerator.name == CUDA:
        return graphs + [
            f"{where}.parameters['{key}']: not an option of ONNX Runtime's CUDA provider"
            for key in params
            if key not in CUDA_OPTIONS and key not in CUDA_GRAPH_KEYS
        ]
    if accelerator.name != TENSORRT:
        return [f"{where}.name: '{accelerator.name}' is not supported (use 'tensorrt' or 'cuda')"]
    problems = graphs
    precision = params.get("precision_mode", "FP32").upper()
    if precision not in PRECISION_MODES:
        problems.append(f"{where}.parameters['precision_mode']: '{precision}' is not one of "
                        f"{', '.join(sorted(PRECISION_MODES))}")  # fmt: skip
    workspace = params.get("max_workspace_size_bytes", "1")
    if not workspace.isdigit() or int(workspace) <= 0:
        problems.append(f"{where}.parameters['max_workspace_size_bytes']: '{workspace}' is not "
                        "a positive number of bytes")  # fmt: skip
    for key in params:
        if key in TRT_FILE_KEYS:
            problems.append(f"{where}.parameters['{key}']: names a file on the replica; Portico "
                            "keeps TensorRT's caches in the replica's cache folder")  # fmt: skip
        elif key not in TRT_OPTIONS | TRT_RENAMED.keys() | CUDA_GRAPH_KEYS | {"precision_mode"}:
            problems.append(f"{where}.parameters['{key}']: not a TensorRT option")
    return problems


def _flag(value: bool) -> str:
    return "True" if value else "False"
