"""Routes of the management API, mounted at ``/api/`` (paths are a contract: ARCHITECTURE.md)."""

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView

from console.api.exceptions import api_not_found
from console.api.views.audit import EventListApi
from console.api.views.golden import GoldenRequestDetailApi, GoldenRequestListApi
from console.api.views.models import ModelDetailApi, ModelListApi
from console.api.views.replicas import ReplicaListApi
from console.api.views.sample_inputs import SampleInputDetailApi, SampleInputListApi
from console.api.views.tokens import TokenDetailApi, TokenListApi
from console.api.views.tuning import (
    LoadTestCancelApi,
    LoadTestDetailApi,
    LoadTestListApi,
    SloApi,
    TuningApplyApi,
    TuningCancelApi,
    TuningDetailApi,
    TuningListApi,
)
from console.api.views.versions import (
    ModelRollbackApi,
    ModelVersionApproveApi,
    ModelVersionConfigApi,
    ModelVersionDetailApi,
    ModelVersionListApi,
    ModelVersionPromoteApi,
    ModelVersionRevalidateApi,
)

app_name = "api"

V = "models/<str:name>/versions/<int:version>/"

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("models/", ModelListApi.as_view(), name="model-list"),
    path("models/<str:name>/", ModelDetailApi.as_view(), name="model-detail"),
    path("models/<str:name>/versions/", ModelVersionListApi.as_view(), name="version-list"),
    path(V, ModelVersionDetailApi.as_view(), name="version-detail"),
    path(f"{V}promote/", ModelVersionPromoteApi.as_view(), name="version-promote"),
    path(f"{V}approve/", ModelVersionApproveApi.as_view(), name="version-approve"),
    path(f"{V}revalidate/", ModelVersionRevalidateApi.as_view(), name="version-revalidate"),
    path(f"{V}config/", ModelVersionConfigApi.as_view(), name="version-config"),
    path("models/<str:name>/rollback/", ModelRollbackApi.as_view(), name="model-rollback"),
    path("models/<str:name>/golden/", GoldenRequestListApi.as_view(), name="golden-list"),
    path(
        "models/<str:name>/golden/<int:golden_id>/",
        GoldenRequestDetailApi.as_view(),
        name="golden-detail",
    ),
    path("models/<str:name>/slo/", SloApi.as_view(), name="slo"),
    path(f"{V}sample-inputs/", SampleInputListApi.as_view(), name="sample-input-list"),
    path(
        f"{V}sample-inputs/<int:sample_id>/",
        SampleInputDetailApi.as_view(),
        name="sample-input-detail",
    ),
    path(f"{V}loadtests/", LoadTestListApi.as_view(), name="loadtest-list"),
    path(f"{V}loadtests/<int:job_id>/", LoadTestDetailApi.as_view(), name="loadtest-detail"),
    path(f"{V}loadtests/<int:job_id>/cancel/", LoadTestCancelApi.as_view(), name="loadtest-cancel"),
    path(f"{V}tunings/", TuningListApi.as_view(), name="tuning-list"),
    path(f"{V}tunings/<int:job_id>/", TuningDetailApi.as_view(), name="tuning-detail"),
    path(f"{V}tunings/<int:job_id>/cancel/", TuningCancelApi.as_view(), name="tuning-cancel"),
    path(f"{V}tunings/<int:job_id>/apply/", TuningApplyApi.as_view(), name="tuning-apply"),
    path("events/", EventListApi.as_view(), name="event-list"),
    path("replicas/", ReplicaListApi.as_view(), name="replica-list"),
    path("tokens/", TokenListApi.as_view(), name="token-list"),
    path("tokens/<int:token_id>/", TokenDetailApi.as_view(), name="token-detail"),
    # Anything else under /api/ answers the API's JSON 404, not the console's HTML page.
    re_path(r"^.*$", api_not_found),
]
