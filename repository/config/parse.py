"""Reading and printing ``config.pbtxt`` (protobuf text) and Triton's config JSON."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor, json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from repository.config.errors import ConfigError

_INT64_TYPES = (descriptor.FieldDescriptor.CPPTYPE_INT64, descriptor.FieldDescriptor.CPPTYPE_UINT64)


def parse_config_text(text: str) -> mc.ModelConfig:
    """Parse ``config.pbtxt`` text; unknown fields and syntax errors raise ``ConfigError``."""
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as err:
        raise ConfigError([f"config.pbtxt: failed to read text proto: {err}"]) from None


def parse_config_json(text: str | dict[str, Any]) -> mc.ModelConfig:
    """Parse a config given as JSON (Triton's load API ``config`` parameter)."""
    try:
        data = json.loads(text) if isinstance(text, str) else text
        return json_format.ParseDict(data, mc.ModelConfig())
    except (ValueError, json_format.ParseError) as err:
        raise ConfigError([f"config: failed to parse JSON model configuration: {err}"]) from None


def config_to_text(cfg: mc.ModelConfig) -> str:
    """``config.pbtxt`` text for a config."""
    return str(text_format.MessageToString(cfg))


def config_to_json(cfg: mc.ModelConfig) -> dict[str, Any]:
    """The config as Triton's config endpoint prints it: proto field names, defaults included,
    int64 values as JSON numbers (protobuf's JSON mapping would print them as strings)."""
    data = json_format.MessageToDict(
        cfg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _int64_to_numbers(cfg.DESCRIPTOR, data)
    result: dict[str, Any] = data
    return result


def _int64_to_numbers(message: descriptor.Descriptor, data: dict[str, Any]) -> None:
    for field in message.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value_field = entry.fields_by_name["value"]
            data[field.name] = {k: _convert(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            data[field.name] = [_convert(field, v) for v in value]
        else:
            data[field.name] = _convert(field, value)


def _convert(field: descriptor.FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None and isinstance(value, dict):
        _int64_to_numbers(field.message_type, value)
        return value
    if field.cpp_type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    return value
