"""The inference token check in isolation: CPU per request of the HTTP middleware and the gRPC
wrapper around a handler that does nothing, less the same call without the check.

Unlike the end-to-end rounds, this figure does not move with whatever else runs on the machine
(the minimum of several repeats is taken), so it says what the check costs even on a busy box.
"""

from __future__ import annotations

import asyncio
import collections
import timeit
from collections.abc import Callable, Coroutine
from typing import Any

CALLS = 100_000
REPEATS = 7

Metadatum = collections.namedtuple("Metadatum", "key value")


def per_request_us(key: str) -> dict[str, float]:
    """Microseconds the check adds per request, by protocol."""
    from serving.access.grpc import GuardedServicer
    from serving.access.guard import AccessGuard
    from serving.access.http import AccessMiddleware
    from serving.access.table import AccessTable, TokenGrant, key_hash

    grant = TokenGrant(
        token_id=1, prefix=key[:8], key_hash=key_hash(key), models=None, may_infer=True,
        rate_limit_rps=1e9, max_concurrency=1_000_000,
    )  # fmt: skip
    guard = AccessGuard(AccessTable.of(1, [grant]))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    scope = {
        "type": "http",
        "path": "/v2/models/identity/infer",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/octet-stream"),
                    (b"inference-header-content-length", b"160"),
                    (b"authorization", f"Bearer {key}".encode())],
    }  # fmt: skip
    middleware = AccessMiddleware(app, guard)

    class Servicer:
        async def ModelInfer(self, request: Any, context: Any) -> None:  # noqa: N802 - gRPC name
            return None

    class Context:
        metadata = (
            Metadatum("user-agent", "grpc-c++"),
            Metadatum("authorization", f"Bearer {key}"),
        )

        def invocation_metadata(self) -> tuple[Metadatum, ...]:
            return self.metadata

    request, context = collections.namedtuple("Request", "model_name")("identity"), Context()
    guarded = GuardedServicer(Servicer(), guard).ModelInfer
    bare = Servicer().ModelInfer
    return {
        "http": _cost(lambda: middleware(scope, None, None), lambda: app(scope, None, None)),
        "grpc": _cost(lambda: guarded(request, context), lambda: bare(request, context)),
    }


def _cost(checked: Callable[[], Coroutine[Any, Any, Any]], bare: Callable[[], Any]) -> float:
    return _best_us(checked) - _best_us(bare)


def _best_us(make: Callable[[], Coroutine[Any, Any, Any]]) -> float:
    def once() -> None:
        coroutine = make()
        try:
            coroutine.send(None)  # nothing awaits a real future: one step runs it to the end
        except StopIteration:
            return
        raise AssertionError("the handler waited on something")

    asyncio.set_event_loop(None)
    return min(timeit.repeat(once, number=CALLS, repeat=REPEATS)) / CALLS * 1e6
