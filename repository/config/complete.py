"""One call from config text (or none) to the config a model version is served with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from repository.config.autocomplete import DEFAULT_MAX_BATCH_SIZE, autocomplete
from repository.config.errors import ConfigError
from repository.config.normalize import normalize_config
from repository.config.parse import parse_config_text
from repository.config.validate import config_problems


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
    gpu_count: int = 0,
    auto_complete: bool = True,
    check_devices: bool = True,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> CompletedConfig:
    """Parse ``text`` (None: no ``config.pbtxt``), auto-complete, validate and normalise.

    ``auto_complete=False`` is Triton's ``--disable-auto-complete-config``: the platform/backend
    are still detected and the normalisation still applies, but nothing is read from the model.
    Raises ``ConfigError`` with every problem found.
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
    problems = config_problems(result.config)
    if problems:
        raise ConfigError(problems)
    normalized = normalize_config(result.config, gpu_count=gpu_count, check_devices=check_devices)
    return CompletedConfig(normalized, result.filled, result.warnings)
