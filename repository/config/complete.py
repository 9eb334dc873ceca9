"""One call from config text (or none) to the config a model version is served with."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from repository.config.autocomplete import DEFAULT_MAX_BATCH_SIZE, autocomplete
from repository.config.errors import ConfigError
from repository.config.normalize import normalize_config
from repository.config.parse import parse_config_text
from repository.config.validate import config_problems

PythonAutocomplete = Callable[[mc.ModelConfig, Path], mc.ModelConfig]
# What a Python model's auto_complete_config may set (PROTOCOL §4.3).
PYTHON_FIELDS = (
    "max_batch_size",
    "input",
    "output",
    "dynamic_batching",
    "model_transaction_policy",
)


@dataclasses.dataclass(frozen=True)
class CompletedConfig:
    """A parsed, auto-completed, validated and normalised config and what auto-complete filled."""

    config: mc.ModelConfig
    autocompleted_fields: list[str]
    warnings: list[str]


def complete_config(
    text: str | None,
    *,
    model_name: str,
    version_dir: Path | None,
    gpu_count: int | None = 0,
    auto_complete: bool = True,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    python_autocomplete: PythonAutocomplete | None = None,
) -> CompletedConfig:
    """Parse ``text`` (None: no ``config.pbtxt``), auto-complete, validate and normalise.

    ``auto_complete=False`` is Triton's ``--disable-auto-complete-config``: the platform/backend
    are still detected and the normalisation still applies, but nothing is read from the model.
    ``python_autocomplete(config, version_dir) -> config`` runs a Python model's own
    ``auto_complete_config`` (serving passes ``serving.backends.python.autocomplete``; this package
    never runs user code itself), so that what it adds is validated and normalised too.
    ``gpu_count=None``: the devices are not known here, instance groups keep what the user wrote
    (see ``normalize_config``). Raises ``ConfigError`` with every problem found.
    """
    cfg = parse_config_text(text) if text is not None else mc.ModelConfig()
    if cfg.name and cfg.name != model_name:
        raise ConfigError(
            [
                f"name: unexpected directory name '{model_name}' for model '{cfg.name}', "
                "directory name must equal model name"
            ]
        )
    result = autocomplete(
        cfg,
        model_name=model_name,
        version_dir=version_dir,
        default_max_batch_size=default_max_batch_size,
        read_model=auto_complete,
    )
    config = result.config
    python = config.backend == "python" and auto_complete and version_dir is not None
    if python and python_autocomplete is not None and version_dir is not None:
        before = mc.ModelConfig()
        before.CopyFrom(config)
        config = python_autocomplete(config, version_dir)
        result.filled += [f for f in PYTHON_FIELDS if _changed(before, config, f)]
    problems = config_problems(config)
    if problems:
        raise ConfigError(problems)
    normalized = normalize_config(config, gpu_count=gpu_count)
    return CompletedConfig(normalized, result.filled, result.warnings)


def _changed(before: mc.ModelConfig, after: mc.ModelConfig, field: str) -> bool:
    descriptor = before.DESCRIPTOR.fields_by_name[field]
    # an empty sub-message equals an absent one; presence is what auto-complete changes
    singular_message = descriptor.message_type is not None and not descriptor.is_repeated
    if singular_message and before.HasField(field) != after.HasField(field):
        return True
    return bool(getattr(before, field) != getattr(after, field))
