"""Serializer fields the API's inputs share."""

from __future__ import annotations

from typing import Any

from django.core.files.uploadedfile import UploadedFile
from rest_framework import serializers

CONFIG_MAX_BYTES = 1024 * 1024


class ConfigTextField(serializers.CharField):
    """``config.pbtxt`` text, sent either as a form field or as a file part (``-F config=@...``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, UploadedFile):
            if data.size is not None and data.size > CONFIG_MAX_BYTES:
                raise serializers.ValidationError(f"larger than {CONFIG_MAX_BYTES} bytes.")
            raw = data.read(CONFIG_MAX_BYTES + 1)
            try:
                data = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise serializers.ValidationError("not UTF-8 text.") from error
        return str(super().to_internal_value(data))
