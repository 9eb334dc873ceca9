"""How the server core makes, warms and releases a version's instances and scheduler.

The defaults import the backend table, the scheduler factory and the warm-up lazily, so a server
that only ever loads ONNX models never imports torch; tests pass their own factories instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from serving.backends.base import ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.streaming import StreamItem, UnreadResponses
from serving.core.types import InferRequest, InferResponse
from serving.errors import InvalidArgumentError, ServingError
from serving.schedulers.base import Scheduler
from serving.settings import ServingSettings

if TYPE_CHECKING:
    from serving.core.model_table import LoadedVersion

logger = logging.getLogger("serving.core")

InstanceFactory = Callable[[ModelSpec], list[ModelInstance]]
SchedulerFactory = Callable[..., Scheduler]
WarmupFn = Callable[[ModelSpec, list[ModelInstance]], None]


class InferHost(Protocol):
    """How an instance's thread runs requests on the server it is loaded in (the Python backend's
    BLS); each call waits at most ``timeout_s`` for the next answer. A stream's caller keeps to
    ``unread_responses`` as a network client does."""

    unread_responses: UnreadResponses

    def infer_from_thread(self, request: InferRequest, timeout_s: float) -> InferResponse: ...

    def stream_from_thread(
        self, request: InferRequest, timeout_s: float
    ) -> Iterator[StreamItem]: ...

    def cancel_from_thread(self, request: InferRequest) -> None: ...

    def end_unread_from_thread(self, request: InferRequest, why: str) -> None: ...


@runtime_checkable
class CallsOtherModels(Protocol):
    """An instance whose model may send requests to other models (the Python backend's BLS)."""

    infer_host: InferHost | None


def unload_instances(instances: list[ModelInstance]) -> None:
    for instance in instances:
        try:
            instance.unload()
        except Exception:  # noqa: BLE001
            logger.exception("unloading an instance of '%s' failed", instance.spec.name)


def load_error(name: str, failed: list[tuple[LoadedVersion, str]]) -> ServingError:
    detail = "".join(
        f"version {lv.version} is at UNAVAILABLE state: {reason};" for lv, reason in failed
    )
    return InvalidArgumentError(f"failed to load '{name}', {detail}")


def default_instance_factory(
    settings: ServingSettings, *, infer_host: InferHost | None = None
) -> InstanceFactory:
    """Instances from the backend table, loaded; ``infer_host`` reaches those that need it."""
    from serving.core.devices import gpu_count

    backend_defaults = settings.backend_defaults  # parsed once; the settings checked it

    def create(spec: ModelSpec) -> list[ModelInstance]:
        from serving.backends.registry import create_instances, load_instances

        instances = create_instances(
            spec,
            cpu_count=settings.effective_cpu_count,
            gpu_count=gpu_count(settings),
            backend_defaults=backend_defaults,
        )
        for instance in instances:
            if isinstance(instance, CallsOtherModels):
                instance.infer_host = infer_host
        load_instances(instances)
        return instances

    return create


def default_scheduler_factory() -> SchedulerFactory:
    def create(**kwargs: Any) -> Scheduler:
        from serving.schedulers.factory import create_scheduler

        return create_scheduler(**kwargs)

    return create


def default_warmup() -> WarmupFn:
    def warm(spec: ModelSpec, instances: list[ModelInstance]) -> None:
        from serving.warmup import run_warmup

        run_warmup(spec, instances)

    return warm
