"""``DirectorySource``: a plain Triton-layout folder, with model control modes (PROTOCOL.md §5.7).

- ``none``: load every model at start-up, never look again.
- ``poll``: the same, then re-scan every ``repository_poll_s``: new folders load, removed ones
  unload, new/removed version folders and changed files reload (old versions serve until the new
  ones are READY; a failed reload leaves them serving).
- ``explicit``: load the ``--load-model`` names at start-up, then only through the repository API;
  a load call re-scans the model (new versions, new config, ``config`` and ``file:`` overrides).

An ``s3://`` repository is served from a local copy (``S3RepositoryMirror``) that is brought up to
date at start-up, before each poll-mode scan and before each explicit load.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import tempfile
import time
from pathlib import Path

from serving.core.devices import gpu_count
from serving.core.hops import run_blocking
from serving.core.model_names import check_model_name
from serving.core.model_table import READY
from serving.core.server import InferenceServer, VersionPlan
from serving.errors import InternalError, InvalidArgumentError, ServingError
from serving.settings import ServingSettings
from serving.sources.folder_models import (
    FolderModel,
    model_names,
    plan_model,
    quick_fingerprint,
)
from serving.sources.s3_repository import S3RepositoryMirror

logger = logging.getLogger("serving.sources.directory")


class DirectorySource:
    """Serves the models of one repository folder."""

    def __init__(self, settings: ServingSettings) -> None:
        self.settings = settings
        self.mirror: S3RepositoryMirror | None = None
        if settings.model_repository_url:
            self.mirror = S3RepositoryMirror(
                settings.model_repository_url, cache_dir=settings.cache_dir
            )
            self.repository = self.mirror.local
        else:
            assert settings.model_repository is not None
            self.repository = Path(settings.model_repository)
        self.mode = settings.model_control_mode
        self.server: InferenceServer | None = None
        self._attempted: dict[str, tuple[str, ...]] = {}
        self._scanned: dict[str, str] = {}  # poll mode: quick fingerprint of each model folder
        self._overrides: dict[str, Path] = {}
        self._poller: asyncio.Task[None] | None = None

    # -- ModelSource ---------------------------------------------------------------------------

    async def start(self, server: InferenceServer) -> list[str]:
        self.server = server
        unreadable = await self._sync_at_start()
        if self.mode == "explicit":
            wanted = list(self.settings.load_models)
            names = self.model_names() if wanted == ["*"] else wanted
        else:
            names = self.model_names()
        if self.mode == "poll":
            self._scanned = await run_blocking(
                lambda: {n: quick_fingerprint(self.repository / n) for n in names}
            )
        errors = await self._load_many(names)
        if self.mode == "poll":
            self._poller = asyncio.create_task(self._poll_forever())
        return unreadable + errors

    async def _sync_at_start(self) -> list[str]:
        """Copy an s3:// repository before the first scan; the reason when it cannot be read."""
        if self.mirror is None:
            return []
        try:
            await run_blocking(self.mirror.sync)
        except ServingError as exc:
            return [f"failed to read the model repository: {exc.message}"]
        return []

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        for path in self._overrides.values():
            shutil.rmtree(path, ignore_errors=True)
        if self.mirror is not None:
            self.mirror.close()

    def model_names(self) -> list[str]:
        return model_names(self.repository)

    async def load_model(
        self, name: str, *, config_json: str | None, files: dict[str, bytes]
    ) -> None:
        check_model_name(name)  # NOTE: the name becomes a folder below the repository
        if files and config_json is None:
            raise InvalidArgumentError(
                f"failed to load '{name}', the 'config' parameter is required with "
                "'file:' overrides"
            )
        text = _config_override_text(name, config_json) if config_json is not None else None
        model_dir = self.repository / name
        if files:
            model_dir = await run_blocking(self._write_override, name, files)
        elif self.mirror is not None:
            await run_blocking(self.mirror.sync, name)
        elif not model_dir.is_dir():
            raise InternalError(f"failed to load '{name}', failed to poll from model repository")
        model = await self._plan(model_dir, text)
        if text is not None:
            # A config override always reloads, as in Triton, even when nothing else changed.
            nonce = f"#override-{time.monotonic_ns()}"
            plans = tuple(VersionPlan(p.spec, p.fingerprint + nonce) for p in model.plans)
            model = dataclasses.replace(model, plans=plans)
        await self._load_with_dependencies(model, force=True)

    async def unload_model(self, name: str, *, unload_dependents: bool) -> None:
        check_model_name(name)
        server = self._server()
        entry = server.models.get(name)
        composing: list[str] = []
        if unload_dependents and entry is not None:
            for lv in entry.versions.values():
                composing.extend(s.model_name for s in lv.spec.config.ensemble_scheduling.step)
        await server.unload_model(name)
        for dependency in dict.fromkeys(composing):
            await server.unload_model(dependency)

    # -- loading -------------------------------------------------------------------------------

    def _server(self) -> InferenceServer:
        assert self.server is not None, "source not started"
        return self.server

    async def _plan(self, model_dir: Path, config_text: str | None = None) -> FolderModel:
        return await run_blocking(
            plan_model, model_dir, gpu_count=gpu_count(self.settings), config_text=config_text,
            use_folder_config=config_text is None, config_name=self.settings.model_config_name,
            auto_complete=self.settings.auto_complete_config,
        )  # fmt: skip

    async def _load_many(self, names: list[str]) -> list[str]:
        models = await asyncio.gather(*(self._plan(self.repository / n) for n in names))
        plain = [m for m in models if not m.composing]
        ensembles = [m for m in models if m.composing]
        errors = await asyncio.gather(*(self._apply(m) for m in plain))
        errors += await asyncio.gather(*(self._apply(m) for m in ensembles))
        return [e for e in errors if e]

    async def _load_with_dependencies(self, model: FolderModel, *, force: bool) -> None:
        server = self._server()
        for dependency in model.composing:
            entry = server.models.get(dependency)
            if entry is None or entry.default() is None:
                dep = await self._plan(self.repository / dependency)
                await self._load_with_dependencies(dep, force=False)
        error = await self._apply(model)
        if error:
            raise InvalidArgumentError(error)

    async def _apply(self, model: FolderModel) -> str:
        """Load one scanned model; the error text ('' on success)."""
        server = self._server()
        self._attempted[model.name] = model.fingerprint
        if model.error:
            server.record_model_failure(model.name, model.error)
            return f"failed to load '{model.name}', {model.error}"
        try:
            await server.apply_model(model.name, model.plans)
        except ServingError as exc:
            return exc.message
        return ""

    def _write_override(self, name: str, files: dict[str, bytes]) -> Path:
        root = Path(tempfile.mkdtemp(prefix="portico-override-"))
        model_dir = root / name
        for relative, data in files.items():
            target = (model_dir / relative).resolve()
            if not target.is_relative_to(model_dir.resolve()):
                raise InvalidArgumentError(f"'file:{relative}' points outside the model folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        old = self._overrides.pop(name, None)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self._overrides[name] = root
        return model_dir

    # -- poll mode -----------------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.repository_poll_s)
            try:
                await self.poll_once()
            except Exception:  # noqa: BLE001 - polling must survive a bad scan
                logger.exception("repository poll failed")

    async def poll_once(self) -> None:
        """One poll-mode pass: load new and changed models, unload removed ones."""
        server = self._server()
        if self.mirror is not None:
            await run_blocking(self.mirror.sync)
        names = set(await run_blocking(self.model_names))
        for gone in sorted(set(server.models) - names):
            if any(lv.state == READY for lv in server.models[gone].versions.values()):
                logger.info("model folder '%s' removed; unloading", gone)
            self._attempted.pop(gone, None)
            self._scanned.pop(gone, None)
            await server.unload_model(gone)
        quick = await run_blocking(
            lambda: {n: quick_fingerprint(self.repository / n) for n in sorted(names)}
        )
        touched = [n for n in sorted(names) if self._scanned.get(n) != quick[n]]
        models = await asyncio.gather(*(self._plan(self.repository / n) for n in touched))
        changed = [m for m in models if self._changed(m)]
        for batch in ([m for m in changed if not m.composing], [m for m in changed if m.composing]):
            errors = await asyncio.gather(*(self._apply(m) for m in batch))
            for error in errors:
                if error:
                    logger.warning("%s", error)
        # NOTE: recorded after applying, so a folder changing mid-load is looked at again.
        self._scanned.update({n: quick[n] for n in touched})

    def _changed(self, model: FolderModel) -> bool:
        if self._attempted.get(model.name) == model.fingerprint:
            return False
        entry = self._server().models.get(model.name)
        if entry is None or model.error:
            return True
        serving = {v: lv.fingerprint for v, lv in entry.versions.items() if lv.state == READY}
        planned = {p.spec.version: p.fingerprint for p in model.plans}
        return serving != planned


def _config_override_text(name: str, config_json: str) -> str:
    from repository.config import ConfigError, config_to_text, parse_config_json

    try:
        return str(config_to_text(parse_config_json(config_json)))
    except ConfigError as exc:
        raise InvalidArgumentError(
            f"failed to load '{name}': Invalid config override: "
            + ("; ".join(exc.problems) or str(exc))
        ) from None
