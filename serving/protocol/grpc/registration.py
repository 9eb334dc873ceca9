"""Which RPCs the gRPC listener pre-registers with grpc: the inference ones only.

grpc.aio keeps one pending "request call" per registered method, and one more for every other
method, and after each call it accepts it waits on all of them with ``asyncio.wait``: a cost on
every RPC that grows with the number of registered methods. The generated code registers every
method of a service (22 with the health service), nearly all of them rare. Only the inference
RPCs stay registered; grpc serves the others through the generic handler that the generated code
adds beside the registered ones, which answers for any method not registered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc

REGISTERED_METHODS = frozenset(("ModelInfer", "ModelStreamInfer"))


class InferenceMethodsOnly:
    """Stands in for a grpc server while services register; passes on generic handlers as they
    are, and of the registered ones only the inference RPCs'."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._target.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        kept = {method: h for method, h in handlers.items() if method in REGISTERED_METHODS}
        if kept:
            self._target.add_registered_method_handlers(service, kept)
