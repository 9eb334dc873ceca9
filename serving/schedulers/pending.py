"""One queued request as a scheduler tracks it, from admission to its answer."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from serving.core.types import InferRequest, InferResponse


@dataclasses.dataclass(eq=False, slots=True)
class Pending:
    """A request admitted by a scheduler: its future, when it was queued and where it waits.

    ``eq=False`` keeps identity comparison, so removing one from a deque removes exactly it.
    """

    request: InferRequest
    future: asyncio.Future[InferResponse]
    enqueue_ns: int
    batch_size: int = 1
    level: int = 1
    deadline_ns: int = 0
    timer: asyncio.TimerHandle | None = None
    delayed: bool = False
    queued: bool = True
    outcome: InferResponse | BaseException | None = None
    sequence: Any = None  # the sequence batcher's ``Sequence`` this request belongs to

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
