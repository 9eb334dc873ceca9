"""The server core's model table: model name -> versions -> one ``LoadedVersion`` each."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from serving.backends.base import ModelInstance
from serving.core.model_spec import ModelSpec
from serving.core.signature import ModelSignature
from serving.core.statistics import ModelStatistics
from serving.schedulers.base import Scheduler

READY = "READY"
LOADING = "LOADING"
UNLOADING = "UNLOADING"
UNAVAILABLE = "UNAVAILABLE"
UNKNOWN = "UNKNOWN"
UNLOADED_REASON = "unloaded"


class LoadedVersion:
    """One version of one model and everything loading it produced.

    ``in_flight`` counts requests routed to this version and not yet answered; retiring a version
    waits for it to reach zero before stopping the scheduler, which is what makes swaps lossless.
    """

    __slots__ = (
        "name",
        "version",
        "spec",
        "fingerprint",
        "state",
        "reason",
        "scheduler",
        "statistics",
        "instances",
        "signature",
        "in_flight",
        "_idle",
        "loaded_at",
        "config_json",
        "gate",
    )

    def __init__(self, spec: ModelSpec, fingerprint: str = "") -> None:
        self.name = spec.name
        self.version = spec.version
        self.spec = spec
        self.fingerprint = fingerprint
        self.state = LOADING
        self.reason = ""
        self.gate: Callable[[ModelSpec, list[ModelInstance]], None] | None = None
        self.scheduler: Scheduler | None = None
        self.statistics = ModelStatistics(spec.name, spec.version)
        self.instances: list[ModelInstance] = []
        self.signature = ModelSignature.from_config(spec.config, model_dir=spec.model_dir)
        self.in_flight = 0
        self._idle: asyncio.Event | None = None
        self.loaded_at = time.time()
        self.config_json: dict[str, Any] | None = None

    def enter(self) -> None:
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait (bounded) until no request routed here is still running; True when drained."""
        if self.in_flight == 0:
            return True
        self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=timeout_s)
            return True
        except TimeoutError:
            return False

    @property
    def healthy(self) -> bool:
        return all(instance.is_healthy() for instance in self.instances)

    def row(self) -> dict[str, Any]:
        return {"model": self.name, "version": self.version, "state": self.state,
                "reason": self.reason}  # fmt: skip


class ModelEntry:
    """A model's versions as routing sees them, plus versions loading next to them."""

    __slots__ = ("name", "versions", "loading", "default_version", "lock", "failure")

    def __init__(self, name: str) -> None:
        self.name = name
        self.failure = ""  # a model-level load failure (bad config, no versions)
        self.versions: dict[int, LoadedVersion] = {}
        self.loading: dict[int, LoadedVersion] = {}
        self.default_version: int | None = None
        self.lock = asyncio.Lock()

    def default(self) -> LoadedVersion | None:
        """The pinned (promoted) version when it is ready, else the highest ready version."""
        if self.default_version is not None:
            pinned = self.versions.get(self.default_version)
            if pinned is not None and pinned.state == READY:
                return pinned
        best: LoadedVersion | None = None
        for lv in self.versions.values():
            if lv.state == READY and (best is None or lv.version > best.version):
                best = lv
        return best

    def ready_versions(self) -> list[LoadedVersion]:
        return sorted(
            (lv for lv in self.versions.values() if lv.state == READY), key=lambda lv: lv.version
        )
