"""Ensemble rules that need the composing models' configs (checked when the ensemble loads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from repository.config.datatypes import config_datatype_name
from repository.config.errors import ConfigError


def validate_ensemble_composition(
    cfg: mc.ModelConfig, composing: Mapping[str, mc.ModelConfig]
) -> None:
    """Raise ``ConfigError`` with every ``ensemble_composition_problems``."""
    problems = ensemble_composition_problems(cfg, composing)
    if problems:
        raise ConfigError(problems)


def ensemble_composition_problems(
    cfg: mc.ModelConfig, composing: Mapping[str, mc.ModelConfig]
) -> list[str]:
    """Problems between an ensemble and its composing models (``composing``: name -> config).

    Each step's model must exist, its mapped tensors must be that model's inputs and outputs, the
    ensemble's max_batch_size must not exceed a composing model's, and a tensor must have one data
    type wherever it appears.
    """
    problems: list[str] = []
    types: dict[str, tuple[int, str]] = {e.name: (e.data_type, "ensemble") for e in cfg.input}
    types.update({e.name: (e.data_type, "ensemble") for e in cfg.output})
    for index, step in enumerate(cfg.ensemble_scheduling.step):
        where = f"ensemble_scheduling.step[{index}]"
        model = composing.get(step.model_name)
        if model is None:
            problems.append(f"{where}.model_name: model '{step.model_name}' is not available")
            continue
        if model.max_batch_size < cfg.max_batch_size:
            problems.append(
                f"max_batch_size: ensemble '{cfg.name}' allows maximum batch size "
                f"{cfg.max_batch_size}, but it contains model '{model.name}' which only allows "
                f"maximum batch size to be {model.max_batch_size}"
            )
        problems += _mapped(f"{where}.input_map", step.input_map, model.input, model.name, types)
        problems += _mapped(f"{where}.output_map", step.output_map, model.output, model.name, types)
    return problems


def _mapped(
    where: str,
    mapping: Mapping[str, str],
    entries: Any,
    model: str,
    types: dict[str, tuple[int, str]],
) -> list[str]:
    declared = {entry.name: entry.data_type for entry in entries}
    problems = []
    for model_tensor, tensor in sorted(mapping.items()):
        if model_tensor not in declared:
            problems.append(f"{where}: model '{model}' has no tensor '{model_tensor}'")
            continue
        data_type = declared[model_tensor]
        seen = types.setdefault(tensor, (data_type, f"model '{model}'"))
        if seen[0] != data_type:
            problems.append(
                f"{where}: tensor '{tensor}' is {config_datatype_name(data_type)} in model "
                f"'{model}' but {config_datatype_name(seen[0])} in {seen[1]}"
            )
    return problems
