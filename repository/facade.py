"""The registry as serving sees it: frozen dataclasses and plain functions, no Django models.

``serving/sources/registry.py`` calls these in a background thread. Nothing here returns a model
instance or a queryset, so serving never depends on the ORM's shape.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import datetime
from typing import Any, BinaryIO

from django.db import transaction

from repository import blobs, selectors, services
from repository.blobs import BlobStore
from repository.models import (
    ApiToken,
    GoldenRequest,
    GoldenState,
    GpuCheck,
    ModelVersion,
    VersionState,
)
from repository.selectors.approvals import model_version_code_changes
from repository.services.revision import REVISION_CHANNEL

logger = logging.getLogger(__name__)

__all__ = [
    "REVISION_CHANNEL",
    "AccessSnapshot",
    "BlobRef",
    "BlobStore",
    "InferenceToken",
    "RegistrySnapshot",
    "ReplicaInfo",
    "ServableVersion",
    "access_snapshot",
    "blob_open",
    "blob_store",
    "live_replicas",
    "replica_heartbeat",
    "serving_revision",
    "serving_snapshot",
    "snapshot_dumps",
    "snapshot_loads",
]


@dataclasses.dataclass(frozen=True)
class BlobRef:
    """A file of a version: ``path`` relative to the version folder (or the model folder)."""

    path: str
    sha256: str
    size: int


@dataclasses.dataclass(frozen=True)
class ServableVersion:
    """One version serving may load, with its complete config and its files."""

    model: str
    version: int
    config_text: str
    files: tuple[BlobRef, ...]
    model_files: tuple[BlobRef, ...]
    # Left for the first GPU replica: run warm-up and these golden requests (the validation
    # worker's ``--golden`` entries) on the GPU before traffic, and report in the heartbeat.
    gpu_check_pending: bool = False
    golden: tuple[dict[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class RegistrySnapshot:
    """What should be served at ``revision``: the promoted version of each model (served by
    default) and every loadable version (validated, approved when code-bearing)."""

    revision: int
    promoted: tuple[ServableVersion, ...]
    loadable: tuple[ServableVersion, ...]


@dataclasses.dataclass(frozen=True)
class InferenceToken:
    """A token as serving checks it: its key's sha256, what it may call, until when, how fast.

    ``models`` None means every model; ``may_infer`` False lets it read metadata only.
    ``token_id`` 0 is the console's own key (it has no row).
    """

    token_id: int
    prefix: str
    key_hash: str
    models: tuple[str, ...] | None
    may_infer: bool
    expires_at: datetime | None
    rate_limit_rps: float | None
    max_concurrency: int | None


@dataclasses.dataclass(frozen=True)
class AccessSnapshot:
    """Every token that authenticates at ``revision`` (revoked, expired and inactive users' are
    left out)."""

    revision: int
    tokens: tuple[InferenceToken, ...]


@dataclasses.dataclass(frozen=True)
class ReplicaInfo:
    """A serving replica's latest heartbeat."""

    replica_id: str
    address: str
    http_url: str
    started_at: datetime
    last_seen: datetime
    versions: tuple[dict[str, Any], ...]
    last_error: str


def serving_revision() -> int:
    """The current serving revision (0 before anything was ever served)."""
    return services.serving_revision_current()


def serving_snapshot() -> RegistrySnapshot:
    """A consistent snapshot: revision and versions are read in one transaction."""
    with transaction.atomic():
        # NOTE: the revision is read first, so a change committed meanwhile makes the snapshot look
        # older than its content, never newer: the replica just reads again at the next revision.
        revision = services.serving_revision_current()
        versions = [v for v in selectors.servable_version_list() if _code_as_approved(v)]
    loadable = tuple(_servable(v) for v in versions)
    promoted = tuple(
        s for s, v in zip(loadable, versions, strict=True) if v.state == VersionState.PROMOTED
    )
    return RegistrySnapshot(revision=revision, promoted=promoted, loadable=loadable)


def access_snapshot() -> AccessSnapshot:
    """The token table serving checks requests against, read in one transaction.

    The console's own key is one of its rows (``repository.services.console_key``): serving needs
    no ``SECRET_KEY`` of the console's to accept it.
    """
    with transaction.atomic():
        revision = services.serving_revision_current()
        tokens = tuple(_inference_token(t) for t in selectors.api_token_live_list())
    return AccessSnapshot(revision=revision, tokens=tokens)


def snapshot_dumps(snapshot: RegistrySnapshot) -> str:
    """A snapshot as JSON text: what a replica keeps to start from while the database is down."""
    return json.dumps(dataclasses.asdict(snapshot), sort_keys=True)


def snapshot_loads(text: str) -> RegistrySnapshot:
    """The snapshot ``snapshot_dumps`` wrote (``ValueError``/``KeyError``/``TypeError`` if not)."""
    data = json.loads(text)

    def servable(item: dict[str, Any]) -> ServableVersion:
        return ServableVersion(
            model=item["model"],
            version=int(item["version"]),
            config_text=item["config_text"],
            files=tuple(BlobRef(**ref) for ref in item["files"]),
            model_files=tuple(BlobRef(**ref) for ref in item["model_files"]),
        )

    return RegistrySnapshot(
        revision=int(data["revision"]),
        promoted=tuple(servable(item) for item in data["promoted"]),
        loadable=tuple(servable(item) for item in data["loadable"]),
    )


def blob_open(sha256: str) -> BinaryIO:
    """Open a stored blob for reading through Django's storage API."""
    return blobs.blob_open(sha256)


def blob_store() -> BlobStore:
    """Where blobs live, so serving can read them itself (S3 with boto3, a folder directly)."""
    return blobs.blob_store_describe()


def replica_heartbeat(
    *,
    replica_id: str,
    address: str,
    http_url: str,
    started_at: datetime,
    versions: list[dict[str, Any]],
    last_error: str,
    token_use: dict[int, datetime] | None = None,
) -> None:
    """Record a replica's heartbeat (see ``repository.services.replica_heartbeat``) and when it
    last saw each token (``token_use``: token id -> time)."""
    if token_use:
        services.api_tokens_mark_used(used={k: v for k, v in token_use.items() if k})
    services.replica_heartbeat(
        replica_id=replica_id,
        address=address,
        http_url=http_url,
        started_at=started_at,
        versions=versions,
        last_error=last_error,
    )


def live_replicas(max_age_s: float = selectors.LIVE_REPLICA_MAX_AGE_S) -> list[ReplicaInfo]:
    """Replicas heard from in the last ``max_age_s`` seconds."""
    return [
        ReplicaInfo(
            replica_id=r.replica_id,
            address=r.address,
            http_url=r.http_url,
            started_at=r.started_at,
            last_seen=r.last_seen,
            versions=tuple(r.versions),
            last_error=r.last_error,
        )
        for r in selectors.replica_list(max_age_s=max_age_s)
    ]


def _inference_token(token: ApiToken) -> InferenceToken:
    models, may_infer = selectors.api_token_inference_scope(token)
    return InferenceToken(
        token_id=token.pk, prefix=token.prefix, key_hash=token.key_hash, models=models,
        may_infer=may_infer, expires_at=token.expires_at, rate_limit_rps=token.rate_limit_rps,
        max_concurrency=token.max_concurrency,
    )  # fmt: skip


def _code_as_approved(version: ModelVersion) -> bool:
    """Whether a code-bearing version's files are still the ones approved: rows changed behind
    the registry's back never reach serving, however the version's state reads."""
    changed = model_version_code_changes(version=version)
    if changed:
        logger.warning(
            "%s v%d is not served: files differ from the ones approved (%s)",
            version.model.name,
            version.number,
            ", ".join(changed),
        )
    return not changed


def _servable(version: ModelVersion) -> ServableVersion:
    files = list(version.files.all())
    pending = version.gpu_check == GpuCheck.PENDING
    return ServableVersion(
        model=version.model.name,
        version=version.number,
        config_text=version.config_text,
        files=tuple(_ref(f) for f in files if not f.model_level),
        model_files=tuple(_ref(f) for f in files if f.model_level),
        gpu_check_pending=pending,
        golden=_golden(version) if pending else (),
    )


def _golden(version: ModelVersion) -> tuple[dict[str, Any], ...]:
    from repository.validation.pipeline import golden_entry

    recorded = GoldenRequest.objects.filter(model=version.model, state=GoldenState.RECORDED)
    return tuple(golden_entry(g, expected=True) for g in recorded.order_by("pk"))


def _ref(f: Any) -> BlobRef:
    return BlobRef(path=f.path, sha256=f.blob_id, size=f.blob.size)
