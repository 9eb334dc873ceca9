"""The sequence batcher (PROTOCOL.md §5.3): stateful models, one slot per live sequence.

Each instance has ``slots_per_instance`` slots. A sequence's START claims a free slot (or waits in
the bounded, timed backlog of ``sequence_backlog.py``) and every later request of that correlation
id runs in that slot on that instance, one at a time and in order. Direct strategy: a batch covers
slots 0..highest ready slot, slots with nothing ready padded with Triton's *null request* (zeros,
correlation id 0, READY=false, no response stream). Oldest strategy: a batch is the oldest ready
requests of the instance's sequences, one per sequence, never padded. A sequence with nothing
queued for ``max_sequence_idle_microseconds`` is ended and its slot released, including one that
was handed a slot from the backlog.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Sequence as Seq

import numpy as np

from serving.backends.base import ExecuteResult, ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.statistics import ModelStatistics
from serving.core.types import InferRequest, InferResponse
from serving.errors import CancelledError, InternalError, InvalidArgumentError, UnavailableError
from serving.schedulers.dynamic import INSTANCE_IDLE, MAX_BATCH, PREFERRED_SIZE, QUEUE_DELAY
from serving.schedulers.pending import Pending
from serving.schedulers.queued import QueuedScheduler, wait_until_set
from serving.schedulers.sequence_backlog import EXPIRED_MESSAGE, SequenceBacklog
from serving.schedulers.sequence_tensors import SequenceControls, SequenceStates, null_tensor

DEFAULT_IDLE_US = 1_000_000


@dataclasses.dataclass(eq=False, slots=True)
class Sequence:
    """One live correlation id: its queued requests, its slot and its implicit state."""

    corrid: int | str
    queue: deque[Pending] = dataclasses.field(default_factory=deque)
    slot: int | None = None
    state: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    busy: bool = False
    ended: bool = False
    idle_timer: asyncio.TimerHandle | None = None

    def stop_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None


class SequenceBatcher(QueuedScheduler):
    """Routes every request of a sequence to its slot; direct or oldest batching."""

    def __init__(
        self,
        *,
        spec: ModelSpec,
        instances: Seq[ModelInstance],
        statistics: ModelStatistics,
    ) -> None:
        batching = spec.config.sequence_batching
        self.oldest = batching.WhichOneof("strategy_choice") == "oldest"
        strategy = batching.oldest if self.oldest else batching.direct
        super().__init__(
            spec=spec,
            instances=instances,
            statistics=statistics,
            preserve_ordering=self.oldest and bool(batching.oldest.preserve_ordering),
        )
        width = max(1, self.max_batch_size)
        if self.oldest:
            candidates = int(batching.oldest.max_candidate_sequences)
            self.slots_per_instance = candidates if candidates > 0 else width
            preferred = [int(p) for p in batching.oldest.preferred_batch_size if 0 < p <= width]
            self._preferred = sorted(set(preferred))
        else:
            self.slots_per_instance = width
            self._preferred = []
        self._width = width
        self._delay_ns = int(strategy.max_queue_delay_microseconds) * 1000
        self._min_utilization = (
            0.0 if self.oldest else float(batching.direct.minimum_slot_utilization)
        )
        idle_us = int(batching.max_sequence_idle_microseconds) or DEFAULT_IDLE_US
        self._idle_s = idle_us / 1e6
        self._controls = SequenceControls(spec.config)
        self._states = SequenceStates(spec.config, model_dir=spec.model_dir)
        self._slots: list[Sequence | None] = [None] * (
            len(self.instances) * self.slots_per_instance
        )
        self._sequences: dict[int | str, Sequence] = {}
        self._backlog: SequenceBacklog[Sequence] = SequenceBacklog(
            spec.config, slot_count=len(self._slots), on_expired=self._backlog_expired
        )
        self._ready: list[asyncio.Event] = []
        self._queued = 0  # requests waiting in every sequence's queue (kept, not summed)

    async def start(self) -> None:
        self._ready = [asyncio.Event() for _ in self.instances]
        await super().start()

    @property
    def queue_depth(self) -> int:
        return self._queued

    @property
    def active_sequences(self) -> int:
        return sum(1 for seq in self._slots if seq is not None)

    @property
    def backlog_length(self) -> int:
        return len(self._backlog)

    # -- admission and routing --------------------------------------------------------------

    def _enqueue(self, pending: Pending) -> None:
        request, model = pending.request, self.spec.name
        corrid = request.sequence_id
        if corrid in (0, "", None):
            raise InvalidArgumentError(
                f"inference request to model '{model}' must specify a non-zero or non-empty "
                "correlation ID"
            )
        if self.max_batch_size > 0 and pending.batch_size != 1:
            raise InvalidArgumentError(
                f"inference request to model '{model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        self._controls.check(corrid)
        sequence = self._sequences.get(corrid)
        if sequence is None:
            if not request.sequence_start:
                raise InvalidArgumentError(
                    f"inference request for sequence {corrid} to model '{model}' must specify "
                    "the START flag on the first request of the sequence"
                )
            sequence = Sequence(corrid)
            self._assign(sequence, request)  # may refuse it: the backlog is full
            self._sequences[corrid] = sequence
        elif sequence.slot is None:
            self._backlog.tighten(sequence, request_timeout_us=request.timeout_us)
        sequence.stop_idle_timer()
        pending.sequence = sequence
        sequence.queue.append(pending)
        self._queued += 1
        self._signal(sequence)

    def _assign(self, sequence: Sequence, request: InferRequest) -> None:
        """Give the sequence a free slot, spreading sequences across instances; else backlog."""
        count = len(self.instances)
        for local in range(self.slots_per_instance):
            for instance in range(count):
                slot = instance * self.slots_per_instance + local
                if self._slots[slot] is None:
                    self._slots[slot] = sequence
                    sequence.slot = slot
                    return
        self._backlog.admit(sequence, corrid=sequence.corrid, request_timeout_us=request.timeout_us)

    def _signal(self, sequence: Sequence) -> None:
        if sequence.slot is not None and self._ready:
            self._ready[sequence.slot // self.slots_per_instance].set()

    def _end(self, sequence: Sequence) -> None:
        """Release the sequence's slot to the oldest backlogged sequence (or its backlog place)."""
        sequence.ended = True
        sequence.stop_idle_timer()
        if self._sequences.get(sequence.corrid) is sequence:
            del self._sequences[sequence.corrid]
        slot, sequence.slot = sequence.slot, None
        if slot is None:
            # NOTE: a backlogged sequence whose client left must not later take a slot that
            # nothing would free again.
            self._backlog.discard(sequence)
            return
        self._slots[slot] = None
        waiting = self._backlog.pop()
        if waiting is None:
            return
        self._slots[slot] = waiting
        waiting.slot = slot
        if waiting.queue:
            self._signal(waiting)
        else:
            self._arm_idle_timer(waiting)  # a slot holder always has something to free it

    def _backlog_expired(self, sequence: Sequence) -> None:
        """The sequence waited too long for a slot: its requests fail as Triton's do."""
        sequence.ended = True
        if self._sequences.get(sequence.corrid) is sequence:
            del self._sequences[sequence.corrid]
        while sequence.queue:
            pending = sequence.queue.popleft()
            self._queued -= 1
            self._finish(pending, UnavailableError(EXPIRED_MESSAGE), reason="REJECTED")
        self._update_pending_count()

    def _arm_idle_timer(self, sequence: Sequence) -> None:
        loop = asyncio.get_running_loop()
        sequence.stop_idle_timer()
        sequence.idle_timer = loop.call_later(self._idle_s, self._idle_expired, sequence)

    def _idle_expired(self, sequence: Sequence) -> None:
        sequence.idle_timer = None
        if not sequence.queue and not sequence.busy and not sequence.ended:
            self._end(sequence)

    # -- queue bookkeeping for the base class -----------------------------------------------

    def _remove(self, pending: Pending) -> bool:
        sequence = pending.sequence
        if sequence is None:
            return False
        try:
            sequence.queue.remove(pending)
        except ValueError:
            return False
        self._queued -= 1
        return True

    def _cancelled(self, pending: Pending) -> None:
        was_queued = pending.queued
        super()._cancelled(pending)
        sequence = pending.sequence
        if not was_queued or sequence is None:
            return
        # Cancelling one request cancels the rest of its sequence, as in Triton.
        message = f"request of sequence {sequence.corrid} cancelled with an earlier request"
        while sequence.queue:
            other = sequence.queue.popleft()
            self._queued -= 1
            self._finish(other, CancelledError(message), reason="CANCELED")
        self._update_pending_count()
        if not sequence.busy:
            self._end(sequence)

    def _drain_queue(self) -> list[Pending]:
        drained = [p for seq in self._sequences.values() for p in seq.queue]
        for seq in self._sequences.values():
            seq.queue.clear()
            seq.stop_idle_timer()
        self._backlog.clear()
        self._queued = 0
        return drained

    # -- batch formation --------------------------------------------------------------------

    def _instance_slots(self, index: int) -> list[Sequence | None]:
        first = index * self.slots_per_instance
        return self._slots[first : first + self.slots_per_instance]

    async def _next_batch(self, index: int) -> tuple[list[Pending], str]:
        event = self._ready[index]
        while True:
            event.clear()
            batch, reason, wait_s = self._form(index, time.monotonic_ns())
            if batch:
                for pending in batch:
                    pending.sequence.queue.popleft()
                    self._queued -= 1
                    pending.sequence.busy = True
                return batch, reason
            await wait_until_set(event, wait_s)

    def _form(self, index: int, now_ns: int) -> tuple[list[Pending], str, float | None]:
        """The batch instance ``index`` runs now and why, or nothing and how long to wait."""
        slots = self._instance_slots(index)
        heads = [seq.queue[0] for seq in slots if seq is not None and seq.queue]
        if not heads:
            return [], "", None
        if self.oldest:
            heads.sort(key=lambda p: p.enqueue_ns)
            heads = heads[: self._width]
            target = self._preferred[-1] if self._preferred else self._width
        else:
            target = sum(1 for seq in slots if seq is not None)  # every live slot ready
        waited_ns = now_ns - min(p.enqueue_ns for p in heads)
        full = len(heads) >= target
        expired = self._delay_ns > 0 and waited_ns >= self._delay_ns
        if self._delay_ns and not full and not expired and self._should_wait(len(heads)):
            return [], "", (self._delay_ns - waited_ns) / 1e9
        if self.oldest and self._preferred and not expired:
            fitting = [size for size in self._preferred if size <= len(heads)]
            if fitting:
                return heads[: fitting[-1]], PREFERRED_SIZE, None
        if full:
            return heads, MAX_BATCH, None
        return heads, (QUEUE_DELAY if expired else INSTANCE_IDLE), None

    def _should_wait(self, ready: int) -> bool:
        """Oldest: wait for more until the delay. Direct: only below minimum_slot_utilization.

        Triton's direct strategy runs as soon as one slot is ready unless
        ``minimum_slot_utilization`` asks for a larger share of the slots first.
        """
        if self.oldest:
            return True
        return ready / self.slots_per_instance < self._min_utilization

    # -- execution --------------------------------------------------------------------------

    async def _execute(self, instance: ModelInstance, batch: list[Pending], reason: str) -> None:
        requests, positions = self._compose(batch)
        padding = frozenset(range(len(requests))) - set(positions)
        results, timing = await self._run(instance, batch, requests, reason=reason, padding=padding)
        real = [results[position] for position in positions]
        for pending, result in zip(batch, real, strict=True):
            self._after(pending, result)
        self._deliver(batch, real, timing)

    def _compose(self, batch: list[Pending]) -> tuple[list[InferRequest], list[int]]:
        """The requests to execute (with controls and state) and where each real one sits."""
        prepared = [self._prepare(pending) for pending in batch]
        if self.oldest:
            return prepared, list(range(len(batch)))
        local = [pending.sequence.slot % self.slots_per_instance for pending in batch]
        by_slot = dict(zip(local, prepared, strict=True))
        filler = prepared[0]
        requests = [by_slot.get(slot) or self._null(filler) for slot in range(max(local) + 1)]
        return requests, local

    def _prepare(self, pending: Pending) -> InferRequest:
        request, sequence = pending.request, pending.sequence
        if request.sequence_start or not sequence.state:
            sequence.state = dict(self._states.initial())
        inputs = dict(request.inputs)
        inputs.update(sequence.state)
        inputs.update(
            self._controls.tensors(
                start=request.sequence_start,
                end=request.sequence_end,
                ready=True,
                corrid=sequence.corrid,
            )
        )
        return dataclasses.replace(request, inputs=inputs)

    def _null(self, filler: InferRequest) -> InferRequest:
        """Triton's null request for an empty slot: ``filler``'s shapes, nothing of its content.

        Zeros for every input (implicit state included), correlation id 0, READY=false, no
        requested outputs and no response stream: a model that keys state by correlation id
        without reading READY, or a decoupled model that answers every request, cannot touch a
        real sequence through it.
        """
        inputs = {name: null_tensor(array) for name, array in filler.inputs.items()}
        inputs.update(self._controls.tensors(start=False, end=False, ready=False, corrid=0))
        return InferRequest(
            model_name=filler.model_name,
            inputs=inputs,
            model_version=filler.model_version,
            outputs=[],
        )

    def _batch_abandoned(self, batch: list[Pending], error: InternalError) -> None:
        for pending in batch:
            self._after(pending, error)

    def _after(self, pending: Pending, result: ExecuteResult) -> None:
        sequence: Sequence = pending.sequence
        sequence.busy = False
        if isinstance(result, InferResponse) and self._states:
            sequence.state.update(self._states.capture(result))
        if sequence.ended:
            return
        if pending.request.sequence_end and not sequence.queue:
            self._end(sequence)
        elif sequence.queue:
            self._signal(sequence)
        else:
            self._arm_idle_timer(sequence)
