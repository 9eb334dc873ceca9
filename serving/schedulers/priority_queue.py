"""The dynamic batcher's queue: one FIFO per priority level, each with its queue policy.

PROTOCOL.md §5.2: a full level refuses new requests; a request still queued past its timeout is
rejected (``REJECT``) or moved behind the level's other requests (``DELAY``). Timeouts are armed
as loop timers per request, so an expired request is answered on time even while every instance
is busy, and disarmed when the request leaves the queue.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2

from serving.core.types import InferRequest
from serving.errors import UnavailableError
from serving.schedulers.pending import Pending
from serving.schedulers.queue_bounds import QUEUE_FULL_MESSAGE, effective_max_queue_size

TIMEOUT_MESSAGE = "Request timeout expired"

_DELAY = model_config_pb2.ModelQueuePolicy.TimeoutAction.DELAY


@dataclasses.dataclass(frozen=True, slots=True)
class LevelPolicy:
    """``ModelQueuePolicy`` of one priority level, with units in the names."""

    delay_on_timeout: bool = False
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    @classmethod
    def from_config(
        cls, policy: model_config_pb2.ModelQueuePolicy, *, max_batch_size: int
    ) -> LevelPolicy:
        return cls(
            delay_on_timeout=policy.timeout_action == _DELAY,
            default_timeout_us=int(policy.default_timeout_microseconds),
            allow_timeout_override=bool(policy.allow_timeout_override),
            max_queue_size=effective_max_queue_size(int(policy.max_queue_size), max_batch_size),
        )

    def timeout_us(self, request: InferRequest) -> int:
        """The level's timeout, shortened (never lengthened) by the request's when allowed."""
        requested = int(request.timeout_us)
        if (
            self.allow_timeout_override
            and requested > 0
            and self.default_timeout_us > 0
            and requested < self.default_timeout_us
        ):
            return requested
        return self.default_timeout_us


@dataclasses.dataclass(slots=True)
class Level:
    policy: LevelPolicy
    queue: deque[Pending] = dataclasses.field(default_factory=deque)
    delayed: deque[Pending] = dataclasses.field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.queue) + len(self.delayed)


class PriorityQueue:
    """Per-level FIFOs walked from level 1 (highest priority) down; delayed requests last."""

    def __init__(
        self, batching: model_config_pb2.ModelDynamicBatching, *, max_batch_size: int
    ) -> None:
        self.level_count = max(1, int(batching.priority_levels))
        self.default_level = int(batching.default_priority_level) or 1
        default = LevelPolicy.from_config(
            batching.default_queue_policy, max_batch_size=max_batch_size
        )
        self.levels = {
            level: Level(
                LevelPolicy.from_config(
                    batching.priority_queue_policy[level], max_batch_size=max_batch_size
                )
                if level in batching.priority_queue_policy
                else default
            )
            for level in range(1, self.level_count + 1)
        }

    def __len__(self) -> int:
        return sum(len(level) for level in self.levels.values())

    def level_of(self, request: InferRequest) -> int:
        priority = int(request.priority)
        return priority if 1 <= priority <= self.level_count else self.default_level

    def push(self, pending: Pending) -> int:
        """Queue a request at its level; return its timeout in µs (0 = none). Raise when full."""
        pending.level = self.level_of(pending.request)
        level = self.levels[pending.level]
        if len(level) >= level.policy.max_queue_size:
            raise UnavailableError(QUEUE_FULL_MESSAGE)
        level.queue.append(pending)
        return level.policy.timeout_us(pending.request)

    def __iter__(self) -> Iterator[Pending]:
        for level in self.levels.values():
            yield from level.queue
            yield from level.delayed

    def remove(self, pending: Pending) -> bool:
        level = self.levels[pending.level]
        for queue in (level.queue, level.delayed):
            try:
                queue.remove(pending)
            except ValueError:
                continue
            return True
        return False

    def expire(self, pending: Pending) -> bool:
        """A queued request's timeout passed: True when it must be rejected, False when delayed."""
        level = self.levels[pending.level]
        if not level.policy.delay_on_timeout:
            self.remove(pending)
            return True
        if not pending.delayed:
            level.queue.remove(pending)
            level.delayed.append(pending)
            pending.delayed = True
        return False

    def drain(self) -> list[Pending]:
        drained = list(self)
        for level in self.levels.values():
            level.queue.clear()
            level.delayed.clear()
        return drained
