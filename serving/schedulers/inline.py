"""Whether a batch runs on the event loop itself instead of its instance's thread.

Handing a batch to a thread and back costs two wake-ups and two GIL hand-overs, which on a small
machine is more than a small model's whole run (an identity model or a small MLP at batch 1 runs in
a few microseconds). So an instance whose backend allows it (``ModelInstance.can_run_inline``) runs
on the loop while its recent runs have been cheaper than a budget, the model config parameter
``inline_execution_budget_us`` (default 200; 0 turns this off). The estimate rises at once with an
expensive run and decays slowly, so a model that turns expensive (bigger batches, slower inputs)
goes back to its thread after one run and returns only after many cheap ones. A batch with large
inputs always goes to the thread, whatever the estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2

from serving.backends.registry import int_parameter
from serving.core.types import InferRequest

DEFAULT_BUDGET_US = 200
BUDGET_PARAMETER = "inline_execution_budget_us"
# Inputs beyond this many bytes are never run on the loop: the run's cost grows with them.
MAX_INLINE_INPUT_BYTES = 64 * 1024
# How much of the distance to a cheaper run the estimate moves each time (a slow decay).
DECAY_SHIFT = 3


def configured_budget_us(config: model_config_pb2.ModelConfig) -> int:
    """The model's ``inline_execution_budget_us`` parameter, or the default."""
    value = int_parameter(config, BUDGET_PARAMETER)
    return DEFAULT_BUDGET_US if value is None else value


class InlineEstimate:
    """The recent cost of one model's runs, and the decision it supports."""

    def __init__(self, *, budget_us: int) -> None:
        self.budget_ns = max(0, budget_us) * 1000
        self._estimate_ns: int | None = None  # unknown until a first run (on a thread) is timed

    def should_inline(self, requests: Sequence[InferRequest]) -> bool:
        if self._estimate_ns is None or self._estimate_ns > self.budget_ns:
            return False
        input_bytes = 0
        for request in requests:
            for array in request.inputs.values():
                input_bytes += array.nbytes
        return input_bytes <= MAX_INLINE_INPUT_BYTES

    def observe(self, run_ns: int) -> None:
        """Record one run's duration (on the loop or on a thread)."""
        estimate = self._estimate_ns
        if estimate is None or run_ns >= estimate:
            self._estimate_ns = run_ns
        else:
            self._estimate_ns = estimate - ((estimate - run_ns) >> DECAY_SHIFT)
