"""Fields Triton accepts that Portico does not implement: named, so a config never half-works."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from repository.config.accelerators import accelerator_problems

SUPPORTED_BACKENDS = frozenset({"onnxruntime", "pytorch", "python", "tensorrt"})
SUPPORTED_PLATFORMS = frozenset(
    {"", "onnxruntime_onnx", "pytorch_libtorch", "libtorch", "tensorrt_plan", "ensemble"}
)
NOT_SUPPORTED = "not supported by Portico"


def unsupported_problems(cfg: mc.ModelConfig) -> list[str]:
    """One problem per unsupported field that is set."""
    problems = _backend(cfg) + _top_level(cfg) + _io(cfg) + _instance_groups(cfg)
    problems += _optimization(cfg) + _sequence(cfg)
    return problems


def _backend(cfg: mc.ModelConfig) -> list[str]:
    problems = []
    if cfg.platform not in SUPPORTED_PLATFORMS:
        problems.append(f"platform: '{cfg.platform}' is {NOT_SUPPORTED}")
    elif cfg.backend and cfg.backend not in SUPPORTED_BACKENDS:
        problems.append(f"backend: '{cfg.backend}' is {NOT_SUPPORTED}")
    if cfg.runtime:
        problems.append(f"runtime: a custom backend runtime ('{cfg.runtime}') is {NOT_SUPPORTED}")
    return problems


def _top_level(cfg: mc.ModelConfig) -> list[str]:
    problems = []
    for field in ("batch_input", "batch_output", "cc_model_filenames"):
        if len(getattr(cfg, field)) > 0:
            problems.append(f"{field}: {NOT_SUPPORTED}")
    if cfg.model_operations.op_library_filename:
        problems.append(f"model_operations.op_library_filename: {NOT_SUPPORTED}")
    if len(cfg.model_repository_agents.agents) > 0:
        problems.append(f"model_repository_agents: {NOT_SUPPORTED}")
    if cfg.response_cache.enable:
        problems.append(f"response_cache.enable: the response cache is {NOT_SUPPORTED}")
    if len(cfg.model_metrics.metric_control) > 0:
        problems.append(f"model_metrics: custom metric histograms are {NOT_SUPPORTED}")
    return problems


def _io(cfg: mc.ModelConfig) -> list[str]:
    problems = []
    tensorrt = cfg.backend == "tensorrt" or cfg.platform == "tensorrt_plan"
    for kind, entries in (("input", cfg.input), ("output", cfg.output)):
        for index, entry in enumerate(entries):
            for flag in ("is_shape_tensor", "is_non_linear_format_io"):
                if getattr(entry, flag):
                    why = NOT_SUPPORTED if tensorrt else "only allowed for TensorRT models"
                    problems.append(f"{kind}[{index}].{flag}: {why}")
    return problems


def _instance_groups(cfg: mc.ModelConfig) -> list[str]:
    problems = []
    for index, group in enumerate(cfg.instance_group):
        where = f"instance_group[{index}]"
        if group.HasField("rate_limiter"):
            problems.append(f"{where}.rate_limiter: the rate limiter is {NOT_SUPPORTED}")
        if len(group.secondary_devices) > 0:
            problems.append(f"{where}.secondary_devices: {NOT_SUPPORTED}")
        problems += _profiles(cfg, group, where)
        if group.passive:
            problems.append(f"{where}.passive: passive instances are {NOT_SUPPORTED}")
        if group.host_policy:
            problems.append(f"{where}.host_policy: {NOT_SUPPORTED}")
    return problems


def _profiles(cfg: mc.ModelConfig, group: mc.ModelInstanceGroup, where: str) -> list[str]:
    """TensorRT optimisation profiles: the group's instances run on the first one listed."""
    if len(group.profile) == 0:
        return []
    if not (cfg.backend == "tensorrt" or cfg.platform == "tensorrt_plan"):
        return [f"{where}.profile: only TensorRT plans have optimisation profiles"]
    return [
        f"{where}.profile: '{p}' is not a profile index (a number from 0)"
        for p in group.profile
        if not p.isdigit()
    ]


def _optimization(cfg: mc.ModelConfig) -> list[str]:
    opt = cfg.optimization
    problems = []
    problems += accelerator_problems(cfg)
    if opt.cuda.graphs or len(opt.cuda.graph_spec) > 0:
        problems.append(f"optimization.cuda.graphs: CUDA graphs are {NOT_SUPPORTED}")
    return problems


def _sequence(cfg: mc.ModelConfig) -> list[str]:
    if not cfg.HasField("sequence_batching"):
        return []
    seq = cfg.sequence_batching
    problems = []
    # Implicit state is carried by the sequence batcher (serving.schedulers.sequence_tensors).
    for index, state in enumerate(seq.state):
        if not state.input_name or not state.output_name:
            problems.append(
                f"sequence_batching.state[{index}]: input_name and output_name must not be empty"
            )
        if state.use_growable_memory:
            problems.append(
                f"sequence_batching.state[{index}].use_growable_memory: {NOT_SUPPORTED}"
            )
    if seq.iterative_sequence:
        problems.append(f"sequence_batching.iterative_sequence: {NOT_SUPPORTED}")
    return problems
