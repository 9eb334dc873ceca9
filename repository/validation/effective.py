"""The worker's own check of what the check child claims, before anything is stored.

The child runs uploaded code, so its report is the model's word: the effective config is parsed
and validated here with the same rules as an uploaded config, must keep the model's name and the
backend or platform the uploader declared, and is stored as the worker prints it, not as sent.
"""

from __future__ import annotations

from typing import Any

from repository.config import ConfigError, config_problems, config_to_text, parse_config_text

MAX_FIELD_NAMES = 64
MAX_FIELD_NAME_CHARS = 128


def effective_config_text(*, claimed: Any, model_name: str, submitted_text: str) -> str:
    """The config text to store; raises ``ConfigError`` naming every problem with the claim."""
    if not isinstance(claimed, str) or not claimed.strip():
        raise ConfigError(["effective config: the check returned none"])
    cfg = parse_config_text(claimed)
    problems = [f"effective config: {p}" for p in config_problems(cfg)]
    if cfg.name != model_name:
        problems.append(
            f"effective config: name: '{cfg.name}' is not the model's name '{model_name}'"
        )
    if submitted_text:
        problems += _kept_from_submitted(cfg, parse_config_text(submitted_text))
    if problems:
        raise ConfigError(problems)
    return config_to_text(cfg)


def _kept_from_submitted(cfg: Any, submitted: Any) -> list[str]:
    problems = []
    for field in ("backend", "platform", "max_batch_size"):
        declared = getattr(submitted, field)
        if declared and getattr(cfg, field) != declared:
            problems.append(
                f"effective config: {field}: '{getattr(cfg, field)}' differs from the uploaded "
                f"config's '{declared}'"
            )
    return problems


def autocompleted_field_names(claimed: Any) -> list[str]:
    """The field names the check says it filled in, as bounded plain strings."""
    if not isinstance(claimed, list):
        return []
    return [str(name)[:MAX_FIELD_NAME_CHARS] for name in claimed[:MAX_FIELD_NAMES]]
