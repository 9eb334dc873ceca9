"""A ModelConfig as the JSON a Python model sees (Triton's form: every field, int64 as numbers)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2

_INT64_TYPES = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def config_to_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """Triton's JSON of a config: proto field names, defaults included, int64 as numbers."""
    data: dict[str, Any] = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _numbers(config.DESCRIPTOR, data)
    return data


def config_from_dict(data: dict[str, Any]) -> model_config_pb2.ModelConfig:
    """Parse Triton's JSON form back into a ModelConfig (unknown fields are an error)."""
    return json_format.ParseDict(data, model_config_pb2.ModelConfig())


def _numbers(descriptor: Descriptor, data: dict[str, Any]) -> None:
    for field in descriptor.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.type in _INT64_TYPES:
            data[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                _map_numbers(field.message_type, value)
            elif isinstance(value, list):
                for item in value:
                    _numbers(field.message_type, item)
            elif isinstance(value, dict):
                _numbers(field.message_type, value)


def _map_numbers(entry: Descriptor, value: dict[str, Any]) -> None:
    value_field = entry.fields_by_name["value"]
    for key, item in value.items():
        if value_field.message_type is not None:
            _numbers(value_field.message_type, item)
        elif value_field.type in _INT64_TYPES:
            value[key] = int(item)
