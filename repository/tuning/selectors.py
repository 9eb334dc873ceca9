"""The tuning domain's reads: SLOs, sample inputs and jobs, with what their pages show joined in."""

from __future__ import annotations

from django.db.models import QuerySet

from repository.models import LoadTest, Model, ModelVersion, SampleInput, Slo, Tuning
from repository.tuning.errors import JobNotFoundError


def slo_get(*, model: Model) -> Slo | None:
    return Slo.objects.filter(model=model).first()


def slo_list() -> QuerySet[Slo]:
    return Slo.objects.select_related("model").order_by("model__name")


def load_test_list(
    *, version: ModelVersion | None = None, model: Model | None = None
) -> QuerySet[LoadTest]:
    jobs = LoadTest.objects.select_related("version__model", "created_by")
    if version is not None:
        jobs = jobs.filter(version=version)
    if model is not None:
        jobs = jobs.filter(version__model=model)
    return jobs


def tuning_list(
    *, version: ModelVersion | None = None, model: Model | None = None
) -> QuerySet[Tuning]:
    jobs = Tuning.objects.select_related("version__model", "created_by", "applied_version")
    if version is not None:
        jobs = jobs.filter(version=version)
    if model is not None:
        jobs = jobs.filter(version__model=model)
    return jobs


def tuning_get(*, version: ModelVersion, job_id: int) -> Tuning:
    job = tuning_list(version=version).filter(pk=job_id).first()
    if job is None:
        raise JobNotFoundError("tuning", job_id)
    return job


def load_test_get(*, version: ModelVersion, job_id: int) -> LoadTest:
    job = load_test_list(version=version).filter(pk=job_id).first()
    if job is None:
        raise JobNotFoundError("load test", job_id)
    return job


def sample_input_list(*, version: ModelVersion) -> QuerySet[SampleInput]:
    return SampleInput.objects.filter(version=version).select_related("created_by")


def sample_input_get(*, version: ModelVersion, sample_id: int) -> SampleInput | None:
    return sample_input_list(version=version).filter(pk=sample_id).first()
