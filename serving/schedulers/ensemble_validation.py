"""Load-time checks of an ensemble against the composing models it will call (PROTOCOL.md §5.4).

The config package already checked the ensemble's own dataflow (every tensor produced once and
used, no cycles). What needs the loaded composing models is checked here: each must be loaded and
ready, its mapped tensors must exist with matching data types (``repository.config``) and shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from tritonclient.grpc import model_config_pb2 as mc

from repository.config import ensemble_composition_problems
from serving.errors import InvalidArgumentError, ServingError

Shape = tuple[int, ...]


class ModelResolver(Protocol):
    def resolve(self, name: str, version: int | None) -> Any: ...


def step_version(step: mc.ModelEnsembling.Step) -> int | None:
    return None if step.model_version < 0 else int(step.model_version)


def validate_ensemble(config: mc.ModelConfig, server: ModelResolver) -> None:
    """Raise InvalidArgumentError naming every problem between the ensemble and its models."""
    problems: list[str] = []
    composing: dict[str, mc.ModelConfig] = {}
    for index, step in enumerate(config.ensemble_scheduling.step):
        try:
            loaded = server.resolve(step.model_name, step_version(step))
        except ServingError as exc:
            problems.append(
                f"ensemble_scheduling.step[{index}]: composing model '{step.model_name}' is "
                f"not loaded: {exc.message}"
            )
            continue
        composing[step.model_name] = loaded.spec.config
    if not problems:
        problems += ensemble_composition_problems(config, composing)
        problems += shape_problems(config, composing)
    if problems:
        raise InvalidArgumentError(f"ensemble '{config.name}': " + "; ".join(problems))


def _full_shape(dims: Iterable[int], max_batch_size: int) -> Shape:
    shape = tuple(int(d) for d in dims)
    return (-1, *shape) if max_batch_size > 0 else shape


def _agree(a: Shape, b: Shape) -> bool:
    return len(a) == len(b) and all(x == y or x < 0 or y < 0 for x, y in zip(a, b, strict=True))


def shape_problems(config: mc.ModelConfig, composing: Mapping[str, mc.ModelConfig]) -> list[str]:
    """Tensors whose shapes differ between their producer and a consumer (-1 matches anything)."""
    ensemble_batch = int(config.max_batch_size)
    shapes: dict[str, tuple[Shape, str]] = {
        e.name: (_full_shape(e.dims, ensemble_batch), "the ensemble")
        for e in [*config.input, *config.output]
    }
    problems: list[str] = []
    steps = config.ensemble_scheduling.step
    for direction in ("output_map", "input_map"):
        for index, step in enumerate(steps):
            model = composing[step.model_name]
            entries = model.output if direction == "output_map" else model.input
            declared = {
                e.name: _full_shape(e.dims, model.max_batch_size)
                for e in entries
                if not e.HasField("reshape")
            }
            for model_tensor, tensor in sorted(getattr(step, direction).items()):
                if model_tensor not in declared:
                    continue
                shape = declared[model_tensor]
                seen, where = shapes.setdefault(tensor, (shape, f"model '{model.name}'"))
                if not _agree(seen, shape):
                    problems.append(
                        f"ensemble_scheduling.step[{index}].{direction}: tensor '{tensor}' has "
                        f"shape {list(shape)} in model '{model.name}' but {list(seen)} in {where}"
                    )
    return problems
