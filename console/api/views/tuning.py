"""SLOs, load tests and tunings: start a job (202 with its id), list and read them, cancel one,
and apply a tuning's recommendation as a new version."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import RoleApi
from console.api.serializers import VersionSerializer
from console.permissions import ROLE_DEPLOYER
from repository.selectors import model_get, model_version_get
from repository.tuning import selectors, services
from repository.tuning.sweep import BATCHING_MODES


class SloSerializer(serializers.Serializer[Any]):
    percentile = serializers.ChoiceField(choices=[95, 99], default=95)
    latency_ms = serializers.FloatField(min_value=0.001, help_text="Latency target in ms.")
    max_error_rate = serializers.FloatField(min_value=0, max_value=1, default=0.001)
    expected_rate_per_s = serializers.FloatField(
        min_value=0, default=0, help_text="The arrival rate the model is expected to carry."
    )


class JobSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    model = serializers.CharField(source="version.model.name")
    version = serializers.IntegerField(source="version.number")
    state = serializers.CharField()
    progress = serializers.FloatField()
    message = serializers.CharField()
    error = serializers.CharField()
    parameters = serializers.JSONField()
    cancel_requested = serializers.BooleanField()
    created_by = serializers.CharField(source="created_by.username", default=None)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField()


class LoadTestSerializer(JobSerializer):
    result = serializers.JSONField(
        help_text="p50/p95/p99_ms, throughput_per_s, errors, queue_ms, "
        "compute_{input,infer,output}_ms, batch_sizes, cpu_percent, cpu_cores, gpu_percent (the "
        "server's GPUs' mean utilisation; null where it has none), and generator: "
        "the load generator that measured it (built-in or perf_analyzer)."
    )


class TuningSerializer(JobSerializer):
    slo = serializers.JSONField()
    results = serializers.JSONField(help_text="One entry per setting measured.")
    recommendation = serializers.JSONField(help_text='{"setting", "capacity_per_s", "why"}.')
    applied_version = serializers.IntegerField(source="applied_version.number", default=None)


class LoadTestStartSerializer(serializers.Serializer[Any]):
    mode = serializers.ChoiceField(choices=["rate", "concurrency"], default="concurrency")
    rate_per_s = serializers.FloatField(min_value=0, default=0)
    concurrency = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    duration_s = serializers.FloatField(min_value=0.1, max_value=600, default=10)
    inputs = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="KServe v2 JSON inputs to send (default: the model's golden requests).",
    )


class TuningStartSerializer(serializers.Serializer[Any]):
    slo_p95_ms = serializers.FloatField(
        min_value=0.001, required=False, help_text="Target p95 (default: the model's SLO)."
    )
    rate_per_s = serializers.FloatField(
        min_value=0, required=False, help_text="Expected arrival rate (default: the SLO's)."
    )
    duration_s = serializers.FloatField(
        min_value=0.1, max_value=600, default=2.0, help_text="Seconds per measurement."
    )
    batching = serializers.ListField(
        child=serializers.ChoiceField(choices=BATCHING_MODES), required=False
    )
    instances = serializers.ListField(child=serializers.IntegerField(min_value=1), required=False)
    preferred_batch_sizes = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False
    )
    max_concurrency = serializers.IntegerField(min_value=1, max_value=256, default=16)


def _accepted(request: Request, job: Any, kind: str, serializer: Any) -> Response:
    url = request.build_absolute_uri(
        reverse(f"api:{kind}-detail", args=[job.version.model.name, job.version.number, job.pk])
    )
    body = {**serializer(job).data, "url": url}
    return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": url})


class SloApi(RoleApi):
    """GET: the model's SLO (404 JSON when none). PUT: set it (deployer)."""

    required_roles = {"PUT": ROLE_DEPLOYER}

    @extend_schema(responses=SloSerializer, operation_id="slo_get")
    def get(self, request: Request, name: str) -> Response:
        slo = selectors.slo_get(model=model_get(name=name))
        if slo is None:
            return Response(
                {
                    "message": f"model '{name}' has no SLO",
                    "code": "slo_not_set",
                    "extra": {"model": name},
                },
                status=status.HTTP_404_NOT_FOUND,
            )
        return Response(SloSerializer(slo).data)

    @extend_schema(request=SloSerializer, responses=SloSerializer, operation_id="slo_set")
    def put(self, request: Request, name: str) -> Response:
        given = SloSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        slo = services.slo_set(
            model=model_get(name=name), actor=request.user, **given.validated_data
        )
        return Response(SloSerializer(slo).data)


class LoadTestListApi(RoleApi):
    """GET: the version's load tests with their results. POST: start one (deployer), 202."""

    required_roles = {"POST": ROLE_DEPLOYER}

    @extend_schema(responses=LoadTestSerializer(many=True), operation_id="loadtest_list")
    def get(self, request: Request, name: str, version: int) -> Response:
        v = model_version_get(model=model_get(name=name), number=version)
        return Response(LoadTestSerializer(selectors.load_test_list(version=v), many=True).data)

    @extend_schema(
        request=LoadTestStartSerializer,
        responses={202: LoadTestSerializer},
        operation_id="loadtest_start",
    )
    def post(self, request: Request, name: str, version: int) -> Response:
        given = LoadTestStartSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        v = model_version_get(model=model_get(name=name), number=version)
        job = services.load_test_start(version=v, actor=request.user, **given.validated_data)
        return _accepted(request, job, "loadtest", LoadTestSerializer)


class LoadTestDetailApi(RoleApi):
    @extend_schema(responses=LoadTestSerializer, operation_id="loadtest_get")
    def get(self, request: Request, name: str, version: int, job_id: int) -> Response:
        v = model_version_get(model=model_get(name=name), number=version)
        return Response(LoadTestSerializer(selectors.load_test_get(version=v, job_id=job_id)).data)


class TuningListApi(RoleApi):
    """GET: the version's tunings. POST: start one against the SLO (deployer), 202."""

    required_roles = {"POST": ROLE_DEPLOYER}

    @extend_schema(responses=TuningSerializer(many=True), operation_id="tuning_list")
    def get(self, request: Request, name: str, version: int) -> Response:
        v = model_version_get(model=model_get(name=name), number=version)
        return Response(TuningSerializer(selectors.tuning_list(version=v), many=True).data)

    @extend_schema(
        request=TuningStartSerializer,
        responses={202: TuningSerializer},
        operation_id="tuning_start",
    )
    def post(self, request: Request, name: str, version: int) -> Response:
        given = TuningStartSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = dict(given.validated_data)
        p95 = data.pop("slo_p95_ms", None)
        slo = None if p95 is None else {"percentile": 95, "latency_ms": p95}
        v = model_version_get(model=model_get(name=name), number=version)
        job = services.tuning_start(
            version=v, actor=request.user, slo=slo, rate_per_s=data.pop("rate_per_s", None), **data
        )
        return _accepted(request, job, "tuning", TuningSerializer)


class TuningDetailApi(RoleApi):
    """One tuning: status, progress, per-setting results and the recommendation."""

    @extend_schema(responses=TuningSerializer, operation_id="tuning_get")
    def get(self, request: Request, name: str, version: int, job_id: int) -> Response:
        v = model_version_get(model=model_get(name=name), number=version)
        return Response(TuningSerializer(selectors.tuning_get(version=v, job_id=job_id)).data)


class TuningCancelApi(RoleApi):
    required_roles = {"POST": ROLE_DEPLOYER}

    @extend_schema(request=None, responses=TuningSerializer, operation_id="tuning_cancel")
    def post(self, request: Request, name: str, version: int, job_id: int) -> Response:
        v = model_version_get(model=model_get(name=name), number=version)
        job = services.job_cancel(
            job=selectors.tuning_get(version=v, job_id=job_id), actor=request.user
        )
        return Response(TuningSerializer(job).data)


class LoadTestCancelApi(RoleApi):
    required_roles = {"POST": ROLE_DEPLOYER}

    @extend_schema(request=None, responses=LoadTestSerializer, operation_id="loadtest_cancel")
    def post(self, request: Request, name: str, version: int, job_id: int) -> Response:
        v = model_version_get(model=model_get(name=name), number=version)
        job = services.job_cancel(
            job=selectors.load_test_get(version=v, job_id=job_id), actor=request.user
        )
        return Response(LoadTestSerializer(job).data)


class TuningApplyApi(RoleApi):
    """Create the recommended version (same blobs, the tuned config), validated as any new one;
    202 with that version, which is promotable once ready."""

    required_roles = {"POST": ROLE_DEPLOYER}

    @extend_schema(request=None, responses={202: VersionSerializer}, operation_id="tuning_apply")
    def post(self, request: Request, name: str, version: int, job_id: int) -> Response:
        v = model_version_get(model=model_get(name=name), number=version)
        new = services.tuning_apply(
            tuning=selectors.tuning_get(version=v, job_id=job_id), actor=request.user
        )
        url = request.build_absolute_uri(
            reverse("api:version-detail", args=[new.model.name, new.number])
        )
        body = {"model": new.model.name, "version": new.number, "state": new.state, "url": url}
        return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": url})
