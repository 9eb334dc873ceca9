"""Choosing a model version's scheduler from its config's scheduling oneof."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serving.backends.base import ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.statistics import ModelStatistics
from serving.schedulers.base import Scheduler
from serving.schedulers.default import DefaultScheduler


def create_scheduler(
    *,
    spec: ModelSpec,
    instances: Sequence[ModelInstance],
    statistics: ModelStatistics,
    server: Any,
) -> Scheduler:
    """The scheduler ``spec.config`` asks for: ensemble, sequence, dynamic batcher or default.

    ``server`` is the ``InferenceServer``; only ensembles use it (each step is an ordinary
    ``await server.infer(step_request)``).
    """
    config = spec.config
    choice = config.WhichOneof("scheduling_choice")
    if config.platform == "ensemble" or choice == "ensemble_scheduling":
        from serving.schedulers.ensemble import EnsembleScheduler

        return EnsembleScheduler(spec=spec, statistics=statistics, server=server)
    if choice == "dynamic_batching":
        from serving.schedulers.dynamic import DynamicBatcher

        return DynamicBatcher(spec=spec, instances=instances, statistics=statistics)
    if choice == "sequence_batching":
        from serving.schedulers.sequence import SequenceBatcher

        return SequenceBatcher(spec=spec, instances=instances, statistics=statistics)
    return DefaultScheduler(spec=spec, instances=instances, statistics=statistics)
