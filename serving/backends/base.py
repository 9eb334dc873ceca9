"""The backend contract: how a scheduler drives one model instance.

An instance executes one batch at a time. ``execute`` takes the requests of a batch and returns one
result per request, in the same order: an ``InferResponse`` or the ``ServingError`` that request
failed with (one request's error does not fail its neighbours). A length mismatch is a contract
error raised by ``execute_checked``. Instances run in threads (their runtimes release the GIL)
or front a child process (the Python backend); either way ``execute`` is a blocking call that
schedulers make off the event loop, unless the instance allows a cheap run on the loop itself.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

from serving.core.model_spec import ModelSpec
from serving.core.types import InferRequest, InferResponse
from serving.errors import BackendContractError, ServingError, UnavailableError

ExecuteResult = InferResponse | ServingError


@dataclasses.dataclass(frozen=True, slots=True)
class InstancePlacement:
    """Where one instance runs: its group's name, the kind it resolved to, the device id and (for
    TensorRT plans) the optimisation profile its group names first."""

    name: str
    kind: str  # "KIND_CPU" or "KIND_GPU" (KIND_AUTO is resolved before instances are made)
    device_id: int = 0
    intra_op_threads: int = 1
    profile: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class TensorInfo:
    """A tensor as the loaded artifact really declares it (wire datatype, full shape, -1 = any)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


class ModelInstance(abc.ABC):
    """One loaded copy of a model version."""

    def __init__(self, spec: ModelSpec, placement: InstancePlacement) -> None:
        self.spec = spec
        self.placement = placement

    @abc.abstractmethod
    def load(self) -> None:
        """Load the artifact; raise a ServingError whose message says why it cannot load."""

    @abc.abstractmethod
    def execute(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        """Run one batch; one result per request, same order."""

    @abc.abstractmethod
    def unload(self) -> None:
        """Release everything ``load`` took."""

    @classmethod
    def gpu_unusable_reason(cls) -> str | None:
        """Why this backend's runtime cannot run on a GPU that exists (e.g. a build without
        CUDA); None when it can, or when the backend leaves the device to the model (Python)."""
        return None

    def require_usable_gpu(self) -> None:
        """Fail the load of a GPU placement whose runtime cannot use a GPU.

        NOTE: never a silent CPU fallback: a KIND_GPU version that cannot have its GPU is
        UNAVAILABLE with this reason.
        """
        reason = self.gpu_unusable_reason()
        if reason is not None:
            raise UnavailableError(
                f"failed to load model '{self.spec.name}' version {self.spec.version}: "
                f"instance '{self.placement.name}' is placed on GPU "
                f"{self.placement.device_id} but {reason}"
            )

    def is_healthy(self) -> bool:
        """False when the instance can no longer execute (e.g. its process died)."""
        return True

    def can_run_inline(self) -> bool:
        """True when a cheap ``execute`` may run on the event loop itself (see
        ``serving.schedulers.inline``): an in-process CPU runtime whose run time follows its
        inputs. False for anything that waits on a device, a process or a timeout."""
        return False

    def artifact_io(self) -> tuple[list[TensorInfo], list[TensorInfo]] | None:
        """The inputs and outputs the loaded artifact declares; None when it cannot tell."""
        return None

    def execute_checked(self, requests: Sequence[InferRequest]) -> list[ExecuteResult]:
        results = self.execute(requests)
        if len(results) != len(requests):
            raise BackendContractError(
                f"backend of model '{self.spec.name}' returned {len(results)} results "
                f"for a batch of {len(requests)} requests"
            )
        return results
