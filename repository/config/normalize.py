"""Normalisation (PROTOCOL §4.2): the defaults Triton fills in, shown by the config endpoint."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from repository.config.errors import ConfigError

Kind = mc.ModelInstanceGroup.Kind

DEFAULT_SEQUENCE_IDLE_US = 1_000_000
# Triton gives CPU groups of these backends two instances by default.
TWO_CPU_INSTANCE_BACKENDS = frozenset({"onnxruntime", "tensorflow"})


def normalize_config(cfg: mc.ModelConfig, *, gpu_count: int | None = 0) -> mc.ModelConfig:
    """A normalised copy of ``cfg`` for a machine with ``gpu_count`` GPUs.

    Fills the default version policy, instance groups (names, kind, count, gpus), dynamic batching
    preferred sizes, the sequence idle time and strategy, and the pinned-memory flags. A GPU group
    on a machine without the GPUs it names is an error. ``gpu_count=None`` means the devices are
    not known here (the registry's validation worker: the replica that loads the version decides):
    instance groups only get their names, and keep the kind, count and gpus the user wrote.
    """
    out = mc.ModelConfig()
    out.CopyFrom(cfg)
    if not out.HasField("version_policy"):
        out.version_policy.latest.num_versions = 1
    if out.platform != "ensemble":
        _normalize_instance_groups(out, gpu_count)
        for pinned in ("input_pinned_memory", "output_pinned_memory"):
            if not out.optimization.HasField(pinned):
                getattr(out.optimization, pinned).enable = True
    dynamic = out.dynamic_batching if out.HasField("dynamic_batching") else None
    if dynamic is not None and not dynamic.preferred_batch_size and out.max_batch_size > 0:
        out.dynamic_batching.preferred_batch_size.append(out.max_batch_size)
    if out.HasField("sequence_batching"):
        seq = out.sequence_batching
        if seq.max_sequence_idle_microseconds == 0:
            seq.max_sequence_idle_microseconds = DEFAULT_SEQUENCE_IDLE_US
        if seq.WhichOneof("strategy_choice") is None:
            seq.direct.SetInParent()
    return out


def _normalize_instance_groups(cfg: mc.ModelConfig, gpu_count: int | None) -> None:
    if len(cfg.instance_group) == 0:
        cfg.instance_group.add(name=cfg.name, kind=Kind.KIND_AUTO)
    problems: list[str] = []
    for index, group in enumerate(cfg.instance_group):
        if not group.name:
            group.name = f"{cfg.name}_{index}"
        if gpu_count is None:
            continue
        if group.kind == Kind.KIND_AUTO:
            usable = gpu_count > 0 and all(0 <= gpu < gpu_count for gpu in group.gpus)
            group.kind = Kind.KIND_GPU if usable else Kind.KIND_CPU
        if group.count == 0:
            two = group.kind == Kind.KIND_CPU and cfg.backend in TWO_CPU_INSTANCE_BACKENDS
            group.count = 2 if two else 1
        if group.kind == Kind.KIND_GPU:
            problems += _check_gpus(group, index, gpu_count)
    if problems:
        raise ConfigError(problems)


def _check_gpus(group: mc.ModelInstanceGroup, index: int, gpu_count: int) -> list[str]:
    where = f"instance_group[{index}]"
    if gpu_count == 0:
        return [
            f"{where}.kind: instance group '{group.name}' has kind KIND_GPU "
            "but no GPUs are available"
        ]
    if len(group.gpus) == 0:
        group.gpus.extend(range(gpu_count))
        return []
    return [
        f"{where}.gpus: instance group '{group.name}' specifies invalid or unsupported "
        f"gpu id {gpu}; "
        f"GPUs with at least the minimum required CUDA compute compatibility are: "
        f"{', '.join(str(i) for i in range(gpu_count))}"
        for gpu in group.gpus
        if not 0 <= gpu < gpu_count
    ]
