"""How many requests a model version's queue holds before it refuses more.

Triton leaves the default scheduler's queue and a ``max_queue_size: 0`` level unbounded; Portico
bounds every queue so that a flood of requests costs refusals, not memory. The default bound is
``max(QUEUE_FLOOR, QUEUE_BATCHES_PER_LEVEL * max_batch_size)``: room for many full batches, and
never fewer than the floor. A level's ``max_queue_size`` in ``config.pbtxt`` overrides it. A
refused request gets Triton's UNAVAILABLE ``Exceeds maximum queue size`` (HTTP 503).
"""

from __future__ import annotations

QUEUE_FULL_MESSAGE = "Exceeds maximum queue size"
QUEUE_FLOOR = 1024
QUEUE_BATCHES_PER_LEVEL = 64


def default_max_queue_size(max_batch_size: int) -> int:
    return max(QUEUE_FLOOR, QUEUE_BATCHES_PER_LEVEL * max(1, max_batch_size))


def effective_max_queue_size(configured: int, max_batch_size: int) -> int:
    """The configured ``max_queue_size``, or the default bound where it is 0 (unset)."""
    return configured if configured > 0 else default_max_queue_size(max_batch_size)
