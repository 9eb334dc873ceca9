"""Turning a Triton model folder into version plans: scan, complete the config, pick versions.

Blocking (file reads, ONNX auto-complete); callers run it off the loop. Each plan carries a
fingerprint of everything that would change the loaded model (config text, file sizes and mtimes),
so a re-scan reloads only what changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from serving.core.model_spec import ModelSpec
from serving.core.server import VersionPlan
from serving.errors import ServingError

logger = logging.getLogger("serving.sources.directory")


@dataclasses.dataclass(frozen=True, slots=True)
class FolderModel:
    """What one scan of a model folder produced: its plans, or why it cannot load."""

    name: str
    plans: tuple[VersionPlan, ...] = ()
    error: str = ""
    composing: tuple[str, ...] = ()  # ensemble steps' model names

    @property
    def fingerprint(self) -> tuple[str, ...]:
        return tuple(f"{p.spec.version}:{p.fingerprint}" for p in self.plans) + (self.error,)


def model_names(repository: Path) -> list[str]:
    """Every model folder of a repository (hidden folders skipped)."""
    try:
        return sorted(
            child.name
            for child in repository.iterdir()
            if child.is_dir() and not child.name.startswith(".")
        )
    except OSError:
        return []


def plan_model(
    model_dir: Path,
    *,
    gpu_count: int,
    config_text: str | None = None,
    use_folder_config: bool = True,
    config_name: str = "",
    auto_complete: bool = True,
) -> FolderModel:
    """Scan ``model_dir`` and build one plan per version its version policy selects."""
    from repository.config import ConfigError, complete_config, scan_model_folder, select_versions
    from serving.core.placement import replica_config

    name = model_dir.name
    try:
        folder = scan_model_folder(model_dir, config_name=config_name or None)
        text = folder.config_text if use_folder_config and config_text is None else config_text
        if not folder.versions:
            return FolderModel(name, error="at least one version must be available under the "
                                           f"version policy of model '{name}'")  # fmt: skip
        newest = folder.versions[max(folder.versions)]
        completed = complete_config(
            text, model_name=name, version_dir=newest, gpu_count=None,
            auto_complete=auto_complete, python_autocomplete=_python_autocomplete,
        )  # fmt: skip
        for warning in completed.warnings:
            logger.info("%s: %s", name, warning)
        config = replica_config(completed.config, gpu_count=gpu_count)
        selected = select_versions(config, folder.versions.keys())
    except ConfigError as exc:
        return FolderModel(name, error="; ".join(exc.problems) or str(exc))
    except ServingError as exc:
        return FolderModel(name, error=exc.message)
    except OSError as exc:
        return FolderModel(name, error=str(exc))
    if not selected:
        return FolderModel(name, error="at least one version must be available under the "
                                       f"version policy of model '{name}'")  # fmt: skip
    shared = _model_level_fingerprint(model_dir, set(folder.versions.values()), text)
    plans = tuple(
        VersionPlan(
            ModelSpec(
                name=name,
                version=v,
                config=config,
                model_dir=model_dir,
                version_dir=folder.versions[v],
            ),  # fmt: skip
            fingerprint=_digest(shared, _tree_fingerprint(folder.versions[v])),
        )
        for v in sorted(selected)
    )
    composing = tuple(step.model_name for step in config.ensemble_scheduling.step)
    return FolderModel(name, plans=plans, composing=composing)


def _python_autocomplete(
    config: model_config_pb2.ModelConfig, version_dir: Path
) -> model_config_pb2.ModelConfig:
    """A Python model's own ``auto_complete_config``, run in a throw-away interpreter."""
    from serving.backends.python import autocomplete

    completed: model_config_pb2.ModelConfig = autocomplete(config, version_dir)
    return completed


def quick_fingerprint(model_dir: Path) -> str:
    """Sizes and mtimes of everything in a model folder: cheap enough to compute every poll."""
    try:
        return _tree_fingerprint(model_dir)
    except OSError:
        return ""


def _tree_fingerprint(root: Path) -> str:
    entries = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            entries.append(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}")
    return _digest(*entries)


def _model_level_fingerprint(model_dir: Path, version_dirs: set[Path], text: str | None) -> str:
    entries = [text or ""]
    for path in sorted(model_dir.iterdir()):
        if path in version_dirs:
            continue
        if path.is_file():
            stat = path.stat()
            entries.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
        elif path.is_dir():
            entries.append(f"{path.name}/{_tree_fingerprint(path)}")
    return _digest(*entries)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
