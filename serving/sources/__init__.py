"""Where the model table comes from: a Triton folder or the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from serving.core.server import InferenceServer


class ModelSource(Protocol):
    """Feeds an ``InferenceServer``: the start-up load, then changes until ``stop``."""

    async def start(self, server: InferenceServer) -> list[str]:
        """Load what should serve at start-up; return one message per model that failed."""
        ...

    async def stop(self) -> None: ...

    def model_names(self) -> list[str]: ...

    async def load_model(
        self, name: str, *, config_json: str | None, files: dict[str, bytes]
    ) -> None: ...

    async def unload_model(self, name: str, *, unload_dependents: bool) -> None: ...
