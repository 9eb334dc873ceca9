"""Template context every console page gets."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from repository.sandbox import sandbox_disabled


def validation_sandbox(request: HttpRequest) -> dict[str, Any]:
    """``validation_sandbox_off``: base.html shows a red banner on every page while it is true."""
    return {"validation_sandbox_off": sandbox_disabled()}
