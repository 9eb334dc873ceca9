"""The registry's tables, split by subdomain and re-exported here."""

from repository.models.audit import Event
from repository.models.catalog import (
    Blob,
    GpuCheck,
    Model,
    ModelVersion,
    VersionFile,
    VersionState,
)
from repository.models.golden import GoldenRequest, GoldenState
from repository.models.serving import ServingReplica, ServingRevision
from repository.models.tokens import ApiToken, Role
from repository.tuning.models import JobState, LoadTest, SampleInput, Slo, Tuning

__all__ = [
    "ApiToken",
    "Blob",
    "Event",
    "GoldenRequest",
    "GoldenState",
    "GpuCheck",
    "JobState",
    "LoadTest",
    "Model",
    "ModelVersion",
    "Role",
    "ServingReplica",
    "ServingRevision",
    "SampleInput",
    "Slo",
    "Tuning",
    "VersionFile",
    "VersionState",
]
