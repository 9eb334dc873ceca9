"""The inference server core: model table, version routing, readiness, load / swap / unload.

One ``InferenceServer`` per process, living on the asyncio loop. Transports (HTTP, gRPC) decode into
``InferRequest`` and call ``infer``; sources (folder, registry) call ``apply_model`` and
``unload_model``. A new version is loaded and warmed next to the one serving, routing flips in one
synchronous step on the loop, and the replaced version drains before it unloads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol

from serving.core.classification import classify
from serving.core.hops import run_blocking
from serving.core.loading import (
    InstanceFactory,
    SchedulerFactory,
    WarmupFn,
    default_instance_factory,
    default_scheduler_factory,
    default_warmup,
    load_error,
    unload_instances,
)
from serving.core.model_names import check_model_name
from serving.core.model_spec import ModelSpec
from serving.core.model_table import (
    LOADING,
    READY,
    UNAVAILABLE,
    UNLOADED_REASON,
    UNLOADING,
    LoadedVersion,
    ModelEntry,
)
from serving.core.request_bytes import RequestBytesBudget
from serving.core.signature import check_request
from serving.core.streaming import ResponseStream, StreamItem, UnreadResponses
from serving.core.types import InferRequest, InferResponse
from serving.errors import (
    CancelledError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    ServingError,
    UnavailableError,
    UnsupportedError,
)
from serving.incidents import report_incident
from serving.settings import ServingSettings

logger = logging.getLogger("serving.core")

SERVER_VERSION = "2.73.0"
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "generate",
)


class ModelControl(Protocol):
    """What the repository endpoints ask of the source that owns the model table."""

    def model_names(self) -> list[str]: ...

    async def load_model(
        self, name: str, *, config_json: str | None, files: dict[str, bytes]
    ) -> None: ...

    async def unload_model(self, name: str, *, unload_dependents: bool) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class VersionPlan:
    """One version a source wants served; the same fingerprint means "unchanged, keep it"."""

    spec: ModelSpec
    fingerprint: str = ""
    error: str = ""  # the source already knows it cannot load (e.g. a corrupt artifact)
    # Run on the warm instances before the version takes traffic (off the loop); raising keeps
    # it UNAVAILABLE with the error's message. The registry's pending GPU checks use it.
    gate: WarmupFn | None = None


class InferenceServer:
    """Routes requests to loaded model versions and owns their lifecycle."""

    def __init__(
        self,
        settings: ServingSettings,
        *,
        instance_factory: InstanceFactory | None = None,
        scheduler_factory: SchedulerFactory | None = None,
        warmup: WarmupFn | None = None,
    ) -> None:
        self.settings = settings
        self.models: dict[str, ModelEntry] = {}
        self.control: ModelControl | None = None
        self.on_demand: Callable[[str, int], Awaitable[bool]] | None = None
        self.started_at = time.time()
        self.shutting_down = False
        # Draining: not ready (load balancers stop sending) while still live and serving.
        self.draining = False
        # Opening: the transports are still being bound. HTTP listens before gRPC, so without this
        # an HTTP readiness probe could send traffic to a gRPC port that is not accepting yet.
        self.opening = False
        # Shared by the protocols, which count each inference request they take from a client.
        self.request_bytes = RequestBytesBudget(settings.max_in_flight_request_bytes)
        # What a streamed request's client may leave unread (every decoupled stream's bound).
        self.unread_responses = UnreadResponses(
            settings.max_unread_response_bytes, settings.unread_response_timeout_s
        )
        self._instance_factory = instance_factory or default_instance_factory(
            settings, infer_host=self
        )
        self._loop: asyncio.AbstractEventLoop | None = None  # known once a version loads
        self._scheduler_factory = scheduler_factory or default_scheduler_factory()
        self._warmup = warmup if warmup is not None else default_warmup()

    # -- health --------------------------------------------------------------------------------

    @property
    def live(self) -> bool:
        return not self.shutting_down

    @property
    def ready(self) -> bool:
        if self.shutting_down or self.draining or self.opening:
            return False
        if not self.settings.strict_readiness:
            return True
        for entry in self.models.values():
            if not entry.versions:
                return False
            for lv in entry.versions.values():
                if lv.state == READY and not lv.healthy:
                    return False
                if lv.state != READY and lv.reason != UNLOADED_REASON:
                    return False
        return True

    def server_metadata(self) -> dict[str, Any]:
        return {"name": self.settings.server_id, "version": SERVER_VERSION,
                "extensions": list(EXTENSIONS)}  # fmt: skip

    # -- routing -------------------------------------------------------------------------------

    def entry(self, name: str) -> ModelEntry:
        entry = self.models.get(name)
        if entry is None:
            check_model_name(name)  # NOTE: only on a miss: a served name is always a valid one
            raise InvalidArgumentError(f"Request for unknown model: '{name}' is not found")
        return entry

    def resolve(self, name: str, version: int | None) -> LoadedVersion:
        """The version a request for (name, version) runs on; Triton's errors otherwise."""
        entry = self.models.get(name)
        if entry is None:
            entry = self.entry(name)  # raises Triton's error
        if version is None:
            lv = entry.default()
            if lv is None:
                raise NotFoundError(
                    f"Request for unknown model: '{name}' has no available versions"
                )
            return lv
        lv = entry.versions.get(version)
        if lv is None:
            raise NotFoundError(
                f"Request for unknown model: '{name}' version {version} is not found"
            )
        if lv.state != READY:
            raise UnavailableError(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return lv

    async def infer(
        self, request: InferRequest, *, decoupled_error: str | None = None
    ) -> InferResponse:
        """Run one request on the version it resolves to; raise a ServingError on failure.

        A decoupled model's responses need a stream (``infer_stream``); without one the request
        is refused with ``decoupled_error`` (the transport's message) or a general one.
        """
        try:
            lv = self.resolve(request.model_name, request.model_version)
        except (NotFoundError, UnavailableError):
            if not self._loadable_on_demand(request.model_name, request.model_version):
                raise
            assert self.on_demand is not None and request.model_version is not None
            if not await self.on_demand(request.model_name, request.model_version):
                raise
            lv = self.resolve(request.model_name, request.model_version)
        if lv.signature.decoupled and request.responses is None:
            raise UnsupportedError(decoupled_error or _needs_stream(lv.name))
        scheduler = lv.scheduler
        if scheduler is None:  # pragma: no cover - READY implies a scheduler
            raise UnavailableError(f"model '{lv.name}' version {lv.version} has no scheduler")
        try:
            check_request(request, lv.signature, lv.name)
        except ServingError:
            lv.statistics.record_failure(
                reason="OTHER", total_ns=time.monotonic_ns() - request.arrival_ns
            )
            raise
        lv.enter()
        try:
            response = await scheduler.infer(request)
        finally:
            lv.leave()
        wanted = request.outputs
        if wanted is None:
            return response
        if (
            len(wanted) == 1
            and not wanted[0].classification
            and len(response.outputs) == 1
            and wanted[0].name in response.outputs
        ):
            return response  # NOTE: the common case: what was asked is what came back
        return self._select_outputs(request, response, lv)

    async def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamItem, None]:
        """Every response of one request, in order, each with whether it is the request's last.

        A decoupled model sends any number of responses (an item of None carries only the final
        flag); any other model answers once. A request that cannot start raises; a failure after
        the model took the request (a failed execute, the model's error) is the final item.
        """
        try:
            lv = self.resolve(request.model_name, request.model_version)
        except (NotFoundError, UnavailableError):
            lv = None  # ``infer`` loads on demand or raises Triton's error
        if lv is None or not lv.signature.decoupled:
            yield await self.infer(request), True
            return
        stream = ResponseStream(self.unread_responses, request.model_name, self.request_bytes)
        request.responses = stream
        lv.enter()  # NOTE: a version drains until its streams end, not only their executes
        run = asyncio.ensure_future(self.infer(request))
        run.add_done_callback(lambda task: _end_failed_stream(task, stream))
        ended = False
        try:
            async for item in stream.items():
                ended = item[1]
                yield item
        finally:
            lv.leave()
            if not ended:  # the client went away: a request still queued need not run
                run.cancel()
                stream.cancel()
            stream.close()

    def infer_from_thread(self, request: InferRequest, timeout_s: float) -> InferResponse:
        """``infer`` for a caller on another thread (a Python model's BLS request).

        Waits at most ``timeout_s`` and then cancels the request, so a model that calls itself
        (or a cycle of models) fails that request instead of waiting forever.
        """
        future = asyncio.run_coroutine_threadsafe(self.infer(request), self._running_loop())
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise UnavailableError(
                f"request for model '{request.model_name}' timed out after {timeout_s:g} s"
            ) from None
        except concurrent.futures.CancelledError:
            raise UnavailableError(
                f"request for model '{request.model_name}' was cancelled"
            ) from None

    def stream_from_thread(self, request: InferRequest, timeout_s: float) -> Iterator[StreamItem]:
        """``infer_stream`` for a caller on another thread (a Python model's decoupled BLS
        request): each item as the caller asks for it, waiting at most ``timeout_s`` for it.

        NOTE: pulled one at a time, never pumped ahead: responses the caller has not asked for
        wait in the request's ``ResponseStream``, which bounds them (``unread_responses``) and
        holds the model back as it does for a network client."""
        loop = self._running_loop()
        items = self.infer_stream(request)

        async def next_item() -> StreamItem:
            try:
                return await anext(items)
            except ServingError as error:
                return error, True
            except Exception as error:  # noqa: BLE001 - the caller gets it as the last item
                return InternalError(f"{type(error).__name__}: {error}"), True

        ended = False  # the stream is over, or its last ``anext`` is cancelled (that ends it)
        try:
            while not ended:
                asked = asyncio.run_coroutine_threadsafe(next_item(), loop)
                try:
                    item = asked.result(timeout_s)
                except concurrent.futures.TimeoutError:
                    ended = asked.cancel()  # the request stops with it
                    raise UnavailableError(
                        f"request for model '{request.model_name}' timed out after {timeout_s:g} s"
                    ) from None
                ended = item[1]
                yield item
        finally:
            if not ended:  # the caller stopped asking: the request stops
                with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs
                    asyncio.run_coroutine_threadsafe(items.aclose(), loop)

    def cancel_from_thread(self, request: InferRequest) -> None:
        """A caller on another thread gives up on the streamed ``request`` (a Python model
        cancelling its decoupled BLS request): it ends ``CANCELLED`` after the responses already
        waiting, and its model sees it cancelled. Before its stream has begun, nothing happens."""
        self._on_stream_from_thread(
            request,
            lambda stream: stream.end(
                CancelledError("the request was cancelled by the model that sent it")
            ),
        )

    def end_unread_from_thread(self, request: InferRequest, why: str) -> None:
        """A caller on another thread stopped taking the streamed ``request``'s responses (a
        Python model lagging behind its decoupled BLS request): it ends as for a network client
        that does not read, counted once in the metrics (``ResponseStream.end_unread``)."""
        self._on_stream_from_thread(request, lambda stream: stream.end_unread(why))

    def _on_stream_from_thread(
        self, request: InferRequest, act: Callable[[ResponseStream], None]
    ) -> None:
        """Run ``act`` on ``request``'s stream on the loop, once it has one."""

        def run() -> None:
            if request.responses is not None:
                act(request.responses)

        with contextlib.suppress(UnavailableError, RuntimeError):  # not running: nothing to end
            self._running_loop().call_soon_threadsafe(run)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None or loop.is_closed():
            raise UnavailableError("the server is not running")
        return loop

    def _loadable_on_demand(self, name: str, version: int | None) -> bool:
        """A named version the source may load now: never loaded, or unloaded on purpose (a
        version that failed keeps failing fast instead of reloading on every request)."""
        if self.on_demand is None or version is None:
            return False
        lv = self.models[name].versions.get(version)
        return lv is None or (lv.state == UNAVAILABLE and lv.reason == UNLOADED_REASON)

    def _select_outputs(
        self, request: InferRequest, response: InferResponse, lv: LoadedVersion
    ) -> InferResponse:
        assert request.outputs is not None
        outputs = {}
        batching = lv.signature.max_batch_size > 0
        for wanted in request.outputs:
            array = response.outputs.get(wanted.name)
            if array is None:
                continue
            if wanted.classification > 0:
                array = classify(
                    array,
                    wanted.classification,
                    batching=batching,
                    labels=lv.signature.labels.get(wanted.name),
                    name=wanted.name,
                )
            outputs[wanted.name] = array
        response.outputs = outputs
        return response

    # -- metadata ------------------------------------------------------------------------------

    def model_ready(self, name: str, version: int | None) -> bool:
        entry = self.entry(name)
        lv = entry.default() if version is None else entry.versions.get(version)
        return lv is not None and lv.state == READY and lv.healthy

    def model_metadata(self, name: str, version: int | None) -> dict[str, Any]:
        lv = self.resolve(name, version)
        if version is None:
            versions = [str(v.version) for v in self.models[name].ready_versions()]
        else:
            versions = [str(version)]
        inputs, outputs = lv.signature.tensor_metadata()
        return {"name": name, "versions": versions, "platform": lv.signature.platform,
                "inputs": inputs, "outputs": outputs}  # fmt: skip

    def model_version_for_config(self, name: str, version: int | None) -> LoadedVersion:
        return self.resolve(name, version)

    def statistics(self, name: str | None = None, version: int | None = None) -> dict[str, Any]:
        """Triton's statistics extension body for all models, one model, or one version."""
        if name is None:
            versions = [lv for e in self.models.values() for lv in e.ready_versions()]
        elif version is None:
            versions = self.entry(name).ready_versions()
        else:
            versions = [self.resolve(name, version)]
        return {"model_stats": [lv.statistics.triton_dict() for lv in versions]}

    def index(self, *, ready_only: bool = False) -> list[dict[str, Any]]:
        """Every model the repository knows, with one row per known version."""
        names = set(self.models)
        if self.control is not None:
            names.update(self.control.model_names())
        rows: list[dict[str, Any]] = []
        for name in sorted(names):
            entry = self.models.get(name)
            known: dict[int, LoadedVersion] = {}
            if entry is not None:
                known = {**entry.loading, **entry.versions}
            if not known and not ready_only:
                if entry is not None and entry.failure:
                    rows.append({"name": name, "state": UNAVAILABLE, "reason": entry.failure})
                else:
                    rows.append({"name": name})
            for number in sorted(known):
                lv = known[number]
                if ready_only and lv.state != READY:
                    continue
                row = {"name": name, "version": str(number), "state": lv.state}
                if lv.reason:
                    row["reason"] = lv.reason
                rows.append(row)
        return rows

    def loaded_versions(self) -> list[LoadedVersion]:
        """Versions that serve or are draining, in model then version order (live stats)."""
        return [
            entry.versions[number]
            for name, entry in sorted(self.models.items())
            for number in sorted(entry.versions)
            if entry.versions[number].state in (READY, UNLOADING)
        ]

    def version_rows(self) -> list[dict[str, Any]]:
        """(model, version, state, reason) of every known version, for logs and heartbeats."""
        rows: list[dict[str, Any]] = []
        for entry in self.models.values():
            known = {**entry.loading, **entry.versions}
            rows.extend(known[number].row() for number in sorted(known))
        return rows

    # -- repository endpoints ------------------------------------------------------------------

    async def repository_load(
        self, name: str, *, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        check_model_name(name)
        control = self._require_explicit()
        await control.load_model(name, config_json=config_json, files=files or {})

    async def repository_unload(self, name: str, *, unload_dependents: bool = False) -> None:
        check_model_name(name)
        control = self._require_explicit()
        await control.unload_model(name, unload_dependents=unload_dependents)

    def _require_explicit(self) -> ModelControl:
        if self.control is None or self.settings.model_control_mode != "explicit":
            raise UnavailableError(
                "explicit model load / unload is not allowed if polling is enabled"
            )
        return self.control

    # -- lifecycle -----------------------------------------------------------------------------

    async def apply_model(
        self, name: str, plans: Sequence[VersionPlan], *, default_version: int | None = None
    ) -> None:
        """Make exactly ``plans`` the served versions of ``name``, without downtime.

        Changed or new versions load next to the serving ones; if every load succeeds routing flips
        at once and versions no longer planned drain and unload. If any load fails, nothing that
        was serving changes (all-or-nothing, like Triton); the failure is kept per version and
        raised as one error naming each failed version.
        """
        entry = self.models.setdefault(name, ModelEntry(name))
        async with entry.lock:
            entry.failure = ""
            fresh = [p for p in plans if not self._unchanged(entry, p)]
            for plan in fresh:
                lv = LoadedVersion(plan.spec, plan.fingerprint)
                lv.reason, lv.gate = plan.error, plan.gate
                entry.loading[plan.spec.version] = lv
            new = [entry.loading[p.spec.version] for p in fresh]
            errors = await asyncio.gather(*(self._load(lv) for lv in new))
            failed = [(lv, err) for lv, err in zip(new, errors, strict=True) if err is not None]
            if failed:
                await self._abandon(entry, new, failed)
                raise load_error(name, failed)
            replaced = self._flip(entry, new, {p.spec.version for p in plans}, default_version)
            await asyncio.gather(*(self._retire(lv) for lv in replaced))

    def _unchanged(self, entry: ModelEntry, plan: VersionPlan) -> bool:
        current = entry.versions.get(plan.spec.version)
        return (
            current is not None
            and current.state == READY
            and bool(plan.fingerprint)
            and current.fingerprint == plan.fingerprint
        )

    def _flip(
        self,
        entry: ModelEntry,
        new: list[LoadedVersion],
        planned: set[int],
        default_version: int | None,
    ) -> list[LoadedVersion]:
        # NOTE: no await in here: routing changes in one step on the loop.
        replaced: list[LoadedVersion] = []
        for lv in new:
            entry.loading.pop(lv.version, None)
            old = entry.versions.get(lv.version)
            if old is not None and old.state == READY:
                replaced.append(old)
            entry.versions[lv.version] = lv
        for number, lv in list(entry.versions.items()):
            if number in planned:
                continue
            if lv.state == READY:
                lv.state = UNLOADING
                replaced.append(lv)
            elif lv.state == UNAVAILABLE and lv.reason != UNLOADED_REASON:
                del entry.versions[number]
        entry.default_version = default_version
        return replaced

    async def _abandon(
        self,
        entry: ModelEntry,
        new: list[LoadedVersion],
        failed: list[tuple[LoadedVersion, str]],
    ) -> None:
        failed_versions = {lv.version for lv, _ in failed}
        for lv in new:
            entry.loading.pop(lv.version, None)
            if lv.version not in failed_versions:
                await self._release(lv)
        for lv, reason in failed:
            current = entry.versions.get(lv.version)
            if current is None or current.state != READY:
                lv.state, lv.reason = UNAVAILABLE, reason
                entry.versions[lv.version] = lv

    async def load_version(
        self, spec: ModelSpec, *, fingerprint: str = "", make_default: bool = False
    ) -> None:
        """Load (or reload) one version next to the model's other ready versions."""
        entry = self.models.get(spec.name)
        keep = [
            VersionPlan(lv.spec, lv.fingerprint)
            for lv in (entry.versions.values() if entry is not None else ())
            if lv.state == READY and lv.version != spec.version
        ]
        default = spec.version if make_default else entry.default_version if entry else None
        await self.apply_model(
            spec.name, [*keep, VersionPlan(spec, fingerprint)], default_version=default
        )

    async def unload(self, name: str, version: int | None = None) -> None:
        """Unload one version (drained first), or every version of the model."""
        if version is None:
            await self.unload_model(name)
            return
        entry = self.models.get(name)
        lv = entry.versions.get(version) if entry is not None else None
        if entry is None or lv is None or lv.state != READY:
            return
        async with entry.lock:
            await self._retire(lv)

    def record_model_failure(self, name: str, reason: str) -> None:
        """A model failed before any version could load (config, layout); keep why."""
        entry = self.models.setdefault(name, ModelEntry(name))
        entry.failure = reason
        logger.warning("failed to load '%s': %s", name, reason)

    async def unload_model(self, name: str) -> None:
        """Stop routing to every version of ``name``, drain them, unload; a no-op when unknown."""
        entry = self.models.get(name)
        if entry is None:
            return
        async with entry.lock:
            retiring = [lv for lv in entry.versions.values() if lv.state == READY]
            for lv in retiring:
                lv.state = UNLOADING
            await asyncio.gather(*(self._retire(lv) for lv in retiring))

    async def shutdown(self) -> None:
        """Refuse new work, drain in-flight requests (bounded), unload everything."""
        self.shutting_down = True
        for name in list(self.models):
            await self.unload_model(name)

    async def _load(self, lv: LoadedVersion) -> str | None:
        """Load, warm and start one version; the error text when it cannot serve."""
        started = time.monotonic()
        if lv.reason:
            return lv.reason
        self._loop = asyncio.get_running_loop()
        try:
            lv.instances = await run_blocking(self._instance_factory, lv.spec)
            if self._warmup is not None:
                await run_blocking(self._warmup, lv.spec, lv.instances)
            if lv.gate is not None:
                await run_blocking(lv.gate, lv.spec, lv.instances)
            scheduler = self._scheduler_factory(
                spec=lv.spec, instances=lv.instances, statistics=lv.statistics, server=self
            )
            await scheduler.start()
        except Exception as exc:  # noqa: BLE001 - any load failure is reported per version
            await self._release(lv)
            reason = exc.message if isinstance(exc, ServingError) else f"{exc}"
            logger.warning("failed to load '%s' version %s: %s", lv.name, lv.version, reason)
            return reason or type(exc).__name__
        lv.scheduler = scheduler
        lv.statistics.load_duration_s = time.monotonic() - started
        lv.state = READY
        lv.loaded_at = time.time()
        logger.info("loaded '%s' version %s in %.2fs", lv.name, lv.version,
                    lv.statistics.load_duration_s)  # fmt: skip
        return None

    async def _retire(self, lv: LoadedVersion) -> None:
        lv.state = UNLOADING
        timeout_s = self.settings.exit_timeout_s
        if not await lv.wait_idle(timeout_s):
            logger.warning("'%s' version %s still busy after %ss; unloading", lv.name,
                           lv.version, timeout_s)  # fmt: skip
        await self._release(lv)
        lv.state, lv.reason = UNAVAILABLE, UNLOADED_REASON

    async def _release(self, lv: LoadedVersion) -> None:
        scheduler, lv.scheduler = lv.scheduler, None
        if scheduler is not None:
            try:
                await scheduler.stop(drain_timeout_s=self.settings.exit_timeout_s)
            except Exception:  # noqa: BLE001 - unloading continues whatever the scheduler says
                logger.exception("stopping the scheduler of '%s' v%s failed", lv.name, lv.version)
        instances, lv.instances = lv.instances, []
        if instances:
            await run_blocking(unload_instances, instances)


def _needs_stream(name: str) -> str:
    return f"model '{name}' is decoupled: its responses can only be streamed (ModelStreamInfer)"


def _end_failed_stream(run: asyncio.Future[InferResponse], stream: ResponseStream) -> None:
    """A streamed request that failed before or while executing ends with its error."""
    if run.cancelled():
        return
    error = run.exception()
    if error is None:
        return  # executed: the model ends the stream itself with its final response
    if not isinstance(error, ServingError):
        error = report_incident(error, logger=logger, where="in a streamed request")
    stream.put(error, final=True)


__all__ = [
    "EXTENSIONS",
    "LOADING",
    "READY",
    "UNAVAILABLE",
    "UNLOADING",
    "InferenceServer",
    "LoadedVersion",
    "ModelControl",
    "VersionPlan",
]
