"""Server-wide defaults for backend parameters: Triton's ``--backend-config``.

``--backend-config onnxruntime,allow_spinning=false`` gives every ONNX Runtime model that
parameter unless its own config ``parameters`` set it (the model's word wins, as in Triton). Each
backend lists the settings it takes, with their kind, so a misspelt setting or a bad value stops
the server at start-up instead of failing every model's load later. Nothing here imports a
runtime: the table is checked before any model loads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from tritonclient.grpc import model_config_pb2

from serving.backends.thread_priority import MAX_NICE
from serving.core.model_spec import ModelSpec

FLAG = "--backend-config"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")

# The settings each backend accepts server-wide: the config ``parameters`` keys it reads, by the
# kind of value they take. Keys match case-insensitively, like the parameters themselves.
BACKEND_SETTINGS: dict[str, dict[str, str]] = {
    "onnxruntime": {
        "intra_op_thread_count": "count",
        "inter_op_thread_count": "count",
        "graph_optimization_level": "integer",
        "enable_mem_arena": "boolean",
        "allow_spinning": "boolean",
        "thread_pool_nice": "nice",
    },
    "pytorch": {"intra_op_thread_count": "count"},
    "python": {
        "execute_timeout_s": "seconds",
        "initialize_timeout_s": "seconds",
        "bls_timeout_s": "seconds",
    },
    "tensorrt": {},
}

# backend -> {setting (lower case) -> value}
BackendDefaults = Mapping[str, Mapping[str, str]]


def parse_backend_config(entries: Iterable[str]) -> dict[str, dict[str, str]]:
    """``<backend>,<setting>=<value>`` entries as a table; ValueError names every bad one."""
    table: dict[str, dict[str, str]] = {}
    problems = []
    for entry in entries:
        try:
            backend, setting, value = _parse_entry(entry)
        except ValueError as error:
            problems.append(f"{FLAG} '{entry}': {error}")
            continue
        table.setdefault(backend, {})[setting] = value
    if problems:
        raise ValueError("; ".join(problems))
    return table


def with_backend_defaults(spec: ModelSpec, backend: str, defaults: BackendDefaults) -> ModelSpec:
    """The spec with its backend's server-wide settings added where its config has no such
    parameter. The config is copied: the served config (what clients read) stays the model's."""
    settings = defaults.get(backend)
    if not settings:
        return spec
    own = {key.lower() for key in spec.config.parameters}
    missing = {key: value for key, value in settings.items() if key not in own}
    if not missing:
        return spec
    config = model_config_pb2.ModelConfig()
    config.CopyFrom(spec.config)
    for key, value in missing.items():
        config.parameters[key].string_value = value
    return dataclasses.replace(spec, config=config)


def _parse_entry(entry: str) -> tuple[str, str, str]:
    backend, comma, assignment = entry.partition(",")
    backend = backend.strip().lower()
    setting, equals, value = assignment.partition("=")
    setting, value = setting.strip().lower(), value.strip()
    if not comma or not equals or not backend or not setting:
        raise ValueError("expected <backend>,<setting>=<value>")
    if backend not in BACKEND_SETTINGS:
        raise ValueError(
            f"unknown backend '{backend}' (one of {', '.join(sorted(BACKEND_SETTINGS))})"
        )
    kinds = BACKEND_SETTINGS[backend]
    if setting not in kinds:
        known = ", ".join(sorted(kinds)) or "none"
        raise ValueError(f"backend '{backend}' has no setting '{setting}' (settings: {known})")
    _check_value(kinds[setting], value)
    return backend, setting, value


def _check_value(kind: str, value: str) -> None:
    """The same rules the backends apply to a model's own parameter of that kind."""
    if kind == "boolean":
        if value.lower() not in TRUE_WORDS + FALSE_WORDS:
            raise ValueError(f"must be true or false, got '{value}'")
        return
    expected = "a number of seconds" if kind == "seconds" else "an integer"
    try:
        number = float(value) if kind == "seconds" else int(value)
    except ValueError:
        raise ValueError(f"must be {expected}, got '{value}'") from None
    if kind in ("count", "seconds") and number < 0:
        raise ValueError(f"must not be negative, got '{value}'")
    if kind == "nice" and not 0 <= number <= MAX_NICE:
        raise ValueError(f"must be from 0 to {MAX_NICE}, got '{value}'")
