"""Validation (PROTOCOL §4.2): every problem collected, each naming its field."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from repository.config.errors import ConfigError
from repository.config.layout import BACKEND_BY_PLATFORM
from repository.config.scheduling import scheduling_problems
from repository.config.unsupported import unsupported_problems

Kind = mc.ModelInstanceGroup.Kind


def validate_config(cfg: mc.ModelConfig) -> None:
    """Raise ``ConfigError`` listing every problem with ``cfg`` (complete or not yet normalised)."""
    problems = config_problems(cfg)
    if problems:
        raise ConfigError(problems)


def config_problems(cfg: mc.ModelConfig) -> list[str]:
    """Every problem with ``cfg``; empty when it is valid."""
    problems = _identity(cfg)
    problems += _io_list("input", cfg.input)
    problems += _io_list("output", cfg.output)
    problems += _version_policy(cfg) + _instance_groups(cfg) + _warmup(cfg) + _misc(cfg)
    problems += scheduling_problems(cfg)
    problems += unsupported_problems(cfg)
    return problems


def _identity(cfg: mc.ModelConfig) -> list[str]:
    problems = []
    if not cfg.name:
        problems.append("name: must specify the model name")
    elif "/" in cfg.name or "\\" in cfg.name or cfg.name in (".", ".."):
        problems.append(f"name: invalid model name '{cfg.name}'")
    if not cfg.platform and not cfg.backend:
        problems.append("platform: must specify 'platform' or 'backend'")
    elif cfg.backend and BACKEND_BY_PLATFORM.get(cfg.platform, cfg.backend) != cfg.backend:
        problems.append(
            "platform: unexpected 'platform' and 'backend' pair, got: "
            f"{cfg.platform}, {cfg.backend}"
        )
    if cfg.max_batch_size < 0:
        problems.append(f"max_batch_size: must be >= 0, got {cfg.max_batch_size}")
    if cfg.platform == "ensemble" and not cfg.HasField("ensemble_scheduling"):
        problems.append("ensemble_scheduling: an ensemble must specify ensemble_scheduling")
    return problems


# --------------------------------------------------------------------------- inputs / outputs


def _io_list(kind: str, entries: Sequence[Any]) -> list[str]:
    problems = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"{kind}[{index}]"
        if not entry.name:
            problems.append(f"{where}.name: must not be empty")
        elif entry.name in seen:
            problems.append(f"{where}.name: duplicate {kind} name '{entry.name}'")
        seen.add(entry.name)
        if entry.data_type == mc.TYPE_INVALID:
            problems.append(f"{where}.data_type: must specify a data type")
        problems += _dims(where, entry)
        if kind == "input" and entry.format != mc.ModelInput.Format.FORMAT_NONE:
            problems += _format(where, entry)
        if kind == "output" and entry.label_filename:
            problems += _relative_path(f"{where}.label_filename", entry.label_filename)
    return problems


def _dims(where: str, entry: Any) -> list[str]:
    dims = list(entry.dims)
    if not dims:
        return [
            f"{where}.dims: must specify dims (use dims: [1] with reshape: {{ shape: [] }} "
            "for a scalar per batch item)"
        ]
    problems = [
        f"{where}.dims: dimension must be an integer >= 1, or -1 for a variable size, got {dim}"
        for dim in dims
        if dim < 1 and dim != -1
    ]
    if entry.HasField("reshape") and not problems:
        problems += _reshape(where, dims, list(entry.reshape.shape))
    return problems


def _reshape(where: str, dims: list[int], shape: list[int]) -> list[str]:
    bad = [d for d in shape if d < 1 and d != -1]
    if bad:
        return [f"{where}.reshape.shape: dimension must be an integer >= 1, or -1, got {bad[0]}"]
    if dims.count(-1) != shape.count(-1):
        return [f"{where}.reshape: must have the same number of variable-size dimensions as dims"]
    if _segments(dims) != _segments(shape):
        return [
            f"{where}.reshape: shape {shape} does not have the same number of elements "
            f"as dims {dims}"
        ]
    return []


def _segments(shape: list[int]) -> list[int]:
    """Element counts of the fixed parts before, between and after variable-size (-1) dims."""
    counts, current = [], 1
    for dim in shape:
        if dim == -1:
            counts.append(current)
            current = 1
        else:
            current *= dim
    counts.append(current)
    return counts


def _format(where: str, entry: Any) -> list[str]:
    if len(entry.dims) != 3:
        name = mc.ModelInput.Format.Name(entry.format)
        return [
            f"{where}.format: {name} requires 3 dims (without the batch dim), got {len(entry.dims)}"
        ]
    return []


def _relative_path(where: str, path: str) -> list[str]:
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if path.startswith(("/", "\\")) or ".." in parts or not parts:
        return [f"{where}: must be a file name inside the model folder, got '{path}'"]
    return []


# --------------------------------------------------------------------------- the rest


def _version_policy(cfg: mc.ModelConfig) -> list[str]:
    policy = cfg.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "latest" and policy.latest.num_versions < 1:
        return ["version_policy.latest.num_versions: must be >= 1"]
    if choice == "specific":
        if len(policy.specific.versions) == 0:
            return ["version_policy.specific.versions: must list at least one version"]
        return [
            f"version_policy.specific.versions: invalid version {v}"
            for v in policy.specific.versions
            if v < 0
        ]
    return []


def _instance_groups(cfg: mc.ModelConfig) -> list[str]:
    problems = []
    names: set[str] = set()
    for index, group in enumerate(cfg.instance_group):
        where = f"instance_group[{index}]"
        if group.name and group.name in names:
            problems.append(f"{where}.name: duplicate instance group name '{group.name}'")
        names.add(group.name)
        if group.count < 0:
            problems.append(f"{where}.count: must be >= 0, got {group.count}")
        if group.kind in (Kind.KIND_CPU, Kind.KIND_MODEL) and len(group.gpus) > 0:
            kind = Kind.Name(group.kind)
            problems.append(f"{where}.gpus: GPUs must not be listed for {kind} instance groups")
        problems += [f"{where}.gpus: invalid GPU id {gpu}" for gpu in group.gpus if gpu < 0]
    return problems


def _warmup(cfg: mc.ModelConfig) -> list[str]:
    problems = []
    declared = {entry.name for entry in cfg.input}
    for index, warmup in enumerate(cfg.model_warmup):
        where = f"model_warmup[{index}]"
        if not warmup.name:
            problems.append(f"{where}.name: must not be empty")
        limit = max(cfg.max_batch_size, 1)
        if not 1 <= warmup.batch_size <= limit:
            problems.append(f"{where}.batch_size: must be in [1, {limit}], got {warmup.batch_size}")
        for name, sample in sorted(warmup.inputs.items()):
            problems += _warmup_input(f"{where}.inputs['{name}']", name, sample, declared)
    return problems


def _warmup_input(where: str, name: str, sample: Any, declared: set[str]) -> list[str]:
    problems = []
    if name not in declared:
        problems.append(f"{where}: '{name}' is not an input of the model")
    if sample.data_type == mc.TYPE_INVALID:
        problems.append(f"{where}.data_type: must specify a data type")
    if any(dim < 1 for dim in sample.dims):
        problems.append(f"{where}.dims: warm-up dims must all be >= 1")
    source = sample.WhichOneof("input_data_type")
    if source is None:
        problems.append(f"{where}: must specify zero_data, random_data or input_data_file")
    elif source == "input_data_file":
        problems += _relative_path(f"{where}.input_data_file", sample.input_data_file)
    return problems


def _misc(cfg: mc.ModelConfig) -> list[str]:
    problems = []
    if cfg.default_model_filename:
        problems += _relative_path("default_model_filename", cfg.default_model_filename)
    if cfg.model_transaction_policy.decoupled and cfg.backend != "python":
        problems.append(
            "model_transaction_policy.decoupled: only Python backend models can be decoupled"
        )
    problems += ["parameters: empty parameter key" for key in cfg.parameters if not key]
    if cfg.response_cache.enable and cfg.HasField("sequence_batching"):
        problems.append("response_cache.enable: cannot be combined with sequence_batching")
    return problems
