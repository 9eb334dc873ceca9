"""A ModelConfig as Triton's config endpoint prints it (PROTOCOL.md §2.2).

Protobuf JSON with original field names and every primitive field printed, except that int64 values
are JSON numbers (protobuf prints them as strings; Triton and its clients expect numbers).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor, json_format
from tritonclient.grpc import model_config_pb2

_INT64_TYPES = (
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
)


def config_to_json(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    data: dict[str, Any] = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _numbers(data, config.DESCRIPTOR)
    return data


def _numbers(data: Any, desc: descriptor.Descriptor) -> None:
    if not isinstance(data, dict):
        return
    for field in desc.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                if value_field.message_type is not None:
                    for item in value.values():
                        _numbers(item, value_field.message_type)
                elif value_field.type in _INT64_TYPES:
                    data[field.name] = {k: int(v) for k, v in value.items()}
            elif isinstance(value, list):
                for item in value:
                    _numbers(item, field.message_type)
            else:
                _numbers(value, field.message_type)
        elif field.type in _INT64_TYPES:
            data[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
